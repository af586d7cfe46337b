package token

import (
	"strings"
	"testing"
)

// TestCheck: a token is one word of printable ASCII: what gRPC metadata and an Authorization header carry.
func TestCheck(t *testing.T) {
	for tok, ok := range map[string]bool{"abc-DEF_123.~": true, " padded ": true, "": false, "two words": false,
		"tökén": false, "tab\there": false, "del\x7f": false, "日本": false} {
		got, err := Check(tok, "--control-token")
		if (err == nil) != ok {
			t.Errorf("Check(%q) = %q, %v; want ok %v", tok, got, err, ok)
		}
		if err != nil && tok == "tökén" && !strings.Contains(err.Error(), "printable ASCII") {
			t.Errorf("Check(%q): %v, want it to say printable ASCII", tok, err)
		}
	}
}
