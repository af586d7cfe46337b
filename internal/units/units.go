// Package units parses the human quantities of IRS documents, one grammar everywhere (worker configurations,
// workflows, flags, REST bodies): durations in Go syntax ("250us", "50ms", "1.5s"), percentages ("5%", "0.5%",
// or a bare number meaning percent) and request rates.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration parses a non-negative Go duration ("50ms"). "" and "0" are zero.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 250us, 50ms, 1.5s)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// ParsePercent parses "5%", "0.5 %" or "5" (percent) into a probability in [0, 1].
func ParsePercent(s string) (float64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSpace(strings.TrimSuffix(t, "%"))
	if t == "" {
		return 0, fmt.Errorf("invalid percentage %q (want e.g. 5%%)", s)
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("invalid percentage %q (want e.g. 5%%)", s)
	}
	if v < 0 || v > 100 {
		return 0, fmt.Errorf("percentage %q outside 0-100%%", s)
	}
	return v / 100, nil
}

// MaxRate is the highest arrival rate one load generator accepts, in requests per second: ten times what one
// worker sends on a core (about 100k/s), so that no machine is refused a rate it could pace, and a typo such as
// 1e12 is refused rather than turned into a backlog that grows by millions a second.
const MaxRate = 1e6

// CheckRate checks a request rate in requests per second.
func CheckRate(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("invalid rate %v (want requests per second >= 0)", v)
	}
	if v > MaxRate {
		return fmt.Errorf("rate %g is more than one load generator can pace (at most %g requests per second): "+
			"spread the load over replicas", v, MaxRate)
	}
	return nil
}

// ParseBitRate parses a bandwidth in bits per second, with an SI suffix and an optional "bit": "100M", "1G",
// "2.5Gbit", "1000000". It must be within 1M-1000G (below a megabit a packet takes more than 10 ms to send).
func ParseBitRate(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "bit")
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult, t = 1e3, t[:n-1]
		case 'M':
			mult, t = 1e6, t[:n-1]
		case 'G':
			mult, t = 1e9, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("invalid bandwidth %q (want bits per second, e.g. 100M or 1G)", s)
	}
	v *= mult
	if v < 1e6 || v > 1e12 {
		return 0, fmt.Errorf("bandwidth %q outside 1M-1000G", s)
	}
	return v, nil
}
