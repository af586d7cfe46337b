// Package readyfile is the file a process started with --ready-file writes once it serves (`irs worker`, `irs
// mesh control-plane`), and the process that started it polls for: an irsv1.ReadyFile as JSON, written whole or
// not at all.
package readyfile

import (
	"context"
	"fmt"

	"github.com/irs-sim/irs/internal/atomicfile"
	"github.com/irs-sim/irs/internal/inputfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxBytes is the largest ready file read: one holds a few addresses, about 150 bytes; a path that holds more is
// not a ready file.
const MaxBytes = 64 << 10

// Write writes r to path as JSON through a rename, so a reader polling path finds nothing or all of it.
func Write(path string, r *irsv1.ReadyFile) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600) // it names the control API's port: its owner's only
}

// Read reads the ready file at path, as inputfile.Read reads (at most MaxBytes, no device). A missing, empty or
// unparsable file is an error: a poller keeps waiting. Fields it does not know are ignored (a newer writer), and
// a seed is read as a JSON number too (ready files written before ReadyFile held one).
func Read(ctx context.Context, path string) (*irsv1.ReadyFile, error) {
	b, err := inputfile.Read(ctx, path, MaxBytes)
	if err != nil {
		return nil, err
	}
	r := &irsv1.ReadyFile{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
