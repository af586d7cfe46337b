package behavior

import (
	"errors"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/units"
)

// ParseDuration parses a non-negative Go duration (see units.ParseDuration).
func ParseDuration(s string) (time.Duration, error) { return units.ParseDuration(s) }

// ParsePercent parses a percentage into a probability (see units.ParsePercent).
func ParsePercent(s string) (float64, error) { return units.ParsePercent(s) }

// splitArgs splits "a, b" or "p50=a, p99=b" into trimmed arguments, keyed by name when given.
func splitArgs(s string) (pos []string, named map[string]string, err error) {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, nil, errors.New("empty argument")
		}
		if k, v, ok := strings.Cut(part, "="); ok {
			if named == nil {
				named = map[string]string{}
			}
			named[strings.TrimSpace(k)] = strings.TrimSpace(v)
			continue
		}
		pos = append(pos, part)
	}
	return pos, named, nil
}
