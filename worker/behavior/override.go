package behavior

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Overrides are per-request changes requested the way fortio's echo server accepts them:
//
//	?delay=150us:10,2ms:5   150us 10 % of the time, 2ms 5 %, no delay otherwise; ?delay=1s always
//	?status=503:10,429:1    503 10 % of the time, 429 1 %, 200 otherwise; ?status=503 always
//	?size=1024:10,512:5     1024 bytes 10 % of the time, 512 5 %, the configured size otherwise
//
// A parameter that is present replaces that part of the configured behaviour; percentages are absolute.
type Overrides struct {
	delay  percentList
	status StatusMix
	size   percentList

	hasDelay, hasStatus, hasSize bool
}

// IsZero reports whether no override is requested.
func (o *Overrides) IsZero() bool { return !o.hasDelay && !o.hasStatus && !o.hasSize }

// ParseOverrides parses the raw values of the delay, status and size parameters ("" when absent).
func ParseOverrides(delay, status, size string) (Overrides, error) {
	var o Overrides
	var err error
	if delay != "" {
		o.hasDelay = true
		if o.delay, err = parsePercentList(delay, parseDelayValue); err != nil {
			return Overrides{}, fmt.Errorf("delay=%s: %w", delay, err)
		}
	}
	if status != "" {
		o.hasStatus = true
		if o.status, err = ParseStatusList(status); err != nil {
			return Overrides{}, fmt.Errorf("status=%s: %w", status, err)
		}
	}
	if size != "" {
		o.hasSize = true
		if o.size, err = parsePercentList(size, parseSizeValue); err != nil {
			return Overrides{}, fmt.Errorf("size=%s: %w", size, err)
		}
	}
	return o, nil
}

// Apply replaces the overridden parts of out, drawing status, delay, size in that order. Delays are capped
// at maxDelay.
func (o *Overrides) Apply(out *Outcome, r *rand.Rand, maxDelay time.Duration) {
	if o.hasStatus {
		out.Status = o.status.Pick(r)
	}
	if o.hasDelay {
		d, _ := o.delay.pick(r)
		out.Delay = min(time.Duration(d), maxDelay)
	}
	if o.hasSize {
		if s, ok := o.size.pick(r); ok {
			out.Size = int(s)
		}
	}
}

// percentList is fortio's "value:percent,value:percent" list; a single value without a percentage is 100 %.
type percentList struct {
	values []int64
	cum    []float64
}

func (l *percentList) pick(r *rand.Rand) (int64, bool) {
	if len(l.cum) == 1 && l.cum[0] >= 1 {
		return l.values[0], true // deterministic: draw nothing
	}
	u := r.Float64()
	for i, c := range l.cum {
		if u < c {
			return l.values[i], true
		}
	}
	return 0, false
}

func parsePercentList(s string, parse func(string) (int64, error)) (percentList, error) {
	var l percentList
	var total float64
	for _, part := range strings.Split(s, ",") {
		v, pct, hasPct := strings.Cut(strings.TrimSpace(part), ":")
		n, err := parse(v)
		if err != nil {
			return percentList{}, err
		}
		p := 1.0
		if hasPct {
			if p, err = ParsePercent(pct); err != nil {
				return percentList{}, err
			}
		}
		total += p
		l.values = append(l.values, n)
		l.cum = append(l.cum, total)
	}
	if total > 1+1e-9 {
		return percentList{}, fmt.Errorf("percentages add up to more than 100%%")
	}
	return l, nil
}

func parseDelayValue(s string) (int64, error) {
	d, err := ParseDuration(s)
	return int64(d), err
}

// maxOverrideSize bounds ?size= so that one request cannot make the worker allocate without limit.
const maxOverrideSize = 64 << 20

func parseSizeValue(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > maxOverrideSize {
		return 0, fmt.Errorf("invalid size %q (want 0-%d bytes)", s, maxOverrideSize)
	}
	return n, nil
}
