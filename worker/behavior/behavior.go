package behavior

import (
	"math/rand/v2"
	"time"
)

// Config is the parsed behaviour of the simulated service.
type Config struct {
	Delay  Delay
	Status StatusMix
	// Size is the response body size in bytes.
	Size int
	// CPU is the busy CPU time burnt per request.
	CPU time.Duration
	// QueryOverrides enables fortio-style ?delay=, ?status=, ?size=.
	QueryOverrides bool
	// MaxOverrideDelay caps a delay requested through an override.
	MaxOverrideDelay time.Duration
}

// DefaultMaxOverrideDelay caps per-request delay overrides unless configured otherwise.
const DefaultMaxOverrideDelay = 10 * time.Second

// Outcome is what one request experiences.
type Outcome struct {
	Delay  time.Duration
	Status Status
	Size   int
	CPU    time.Duration
}

// Plan draws the outcome of one request: status first, then delay, always in that order so that a seeded
// sequence of requests reproduces exactly.
func (c *Config) Plan(r *rand.Rand) Outcome {
	return Outcome{Status: c.Status.Pick(r), Delay: c.Delay.Sample(r), Size: c.Size, CPU: c.CPU}
}
