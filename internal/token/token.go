// Package token is the bearer token a workflow run gives its workers' control APIs: made at random for the
// run, kept in a file only its owner can read, and sent on every control call by whoever drives the workers.
package token

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/irs-sim/irs/internal/inputfile"
	"github.com/irs-sim/irs/internal/rundir"
)

// New returns a random token (256 bits, hex).
func New() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b)
}

// Write writes a token to a new file at path, readable by its owner only: a file (or a link) already there is
// refused, not written through (another user's file would stay readable by them).
func Write(path, tok string) error {
	if err := rundir.WriteSecret(path, []byte(tok+"\n")); err != nil {
		return fmt.Errorf("control token: %w", err)
	}
	return nil
}

// MaxFileBytes is the largest token file read: a token is 64 characters; a file far larger is not a token file
// (a --control-token-file /dev/zero read 22 GB before the kernel stopped it).
const MaxFileBytes = 4096

// Read reads a token file: surrounding whitespace is not part of it, and an empty token is an error (a worker
// given an empty token would otherwise run with its control API open). The file is read as inputfile.Read
// reads (at most MaxFileBytes, no device, a pipe until ctx ends).
func Read(ctx context.Context, path string) (string, error) {
	b, err := inputfile.Read(ctx, path, MaxFileBytes)
	if err != nil {
		return "", err
	}
	return Check(string(b), path)
}

// Check returns a token without the whitespace around it, or an error naming where it came from when nothing
// is left: an empty token, from a file, a flag or a variable, would leave a control API open.
func Check(tok, from string) (string, error) {
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("%s holds no token (it is empty or whitespace)", from)
	}
	if strings.ContainsFunc(tok, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		// gRPC metadata carries printable ASCII only: a token beyond it was accepted, then could not be sent by
		// the runner or irs ctl.
		return "", fmt.Errorf("%s: a token is one word of printable ASCII characters (it goes in an Authorization header)", from)
	}
	return tok, nil
}

// Bearer sends a token on every gRPC call ("authorization: Bearer <token>"), over a plain connection too: the
// control APIs it is for listen on loopback.
type Bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if b == "" {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (Bearer) RequireTransportSecurity() bool { return false }
