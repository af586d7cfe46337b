package names_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/irs-sim/irs/internal/names"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"a", "flash-sale", "warm_up", "v1.2", "A9", strings.Repeat("x", 63)} {
		if err := names.Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
		// Every valid name is one path element, inside the directory it is joined to.
		if !filepath.IsLocal(ok) || filepath.Base(ok) != ok {
			t.Errorf("%q is valid but not a single local path element", ok)
		}
	}
	for _, bad := range []string{"", "warm up", "../x", "..", ".", "a/b", "-a", "a-", ".a", "a,b", "a|b", "a\tb",
		"a\x1b[2Kb", "é", strings.Repeat("x", 64)} {
		if err := names.Check(bad); err == nil {
			t.Errorf("Check(%q) = nil, want an error", bad)
		}
	}
}
