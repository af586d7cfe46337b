package kube

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestGoMemoryLimit: the engine's GOMEMLIMIT is a plain byte count (what the Go runtime reads without a unit),
// 90 % of its container's limit: room for what the container is charged and the runtime does not count. The
// cluster e2e checks that the engine's runtime took it (its heartbeat's memory_limit_mb).
func TestGoMemoryLimit(t *testing.T) {
	for _, c := range []struct{ limit, want string }{
		{"2Gi", "1932735283"},
		{"128Mi", "120795955"},
		{"1G", "900000000"},
	} {
		if got := goMemoryLimit(resource.MustParse(c.limit)); got != c.want {
			t.Errorf("goMemoryLimit(%s) = %q, want %s (90 %%, in bytes)", c.limit, got, c.want)
		}
	}
}
