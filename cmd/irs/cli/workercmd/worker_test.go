package workercmd

import (
	"strings"
	"testing"
)

// TestCheckOpenControl: a control API without a token is refused beyond loopback unless --control-open.
func TestCheckOpenControl(t *testing.T) {
	for _, tt := range []struct {
		listen, token string
		open, ok      bool
	}{
		{"127.0.0.1:0", "", false, true},
		{"127.5.6.7:9090", "", false, true},
		{"[::1]:9090", "", false, true},
		{"localhost:9090", "", false, true},
		{"0.0.0.0:9090", "", false, false},
		{":9090", "", false, false},
		{"[::]:9090", "", false, false},
		{"10.1.2.3:9090", "", false, false},
		{"0.0.0.0:9090", "secret", false, true},
		{"0.0.0.0:9090", "", true, true},
	} {
		err := checkOpenControl(tt.listen, tt.token, tt.open)
		if (err == nil) != tt.ok || err != nil && !strings.Contains(err.Error(), "--control-open") {
			t.Errorf("checkOpenControl(%q, %q, %v) = %v, want ok %v", tt.listen, tt.token, tt.open, err, tt.ok)
		}
	}
}
