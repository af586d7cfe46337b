package behavior

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseWeight parses a non-negative relative weight (a trailing % is allowed and ignored).
func parseWeight(s string) (float64, error) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	w, err := strconv.ParseFloat(t, 64)
	if err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
		return 0, fmt.Errorf("invalid weight %q", s)
	}
	return w, nil
}
