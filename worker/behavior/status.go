package behavior

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Status is a response status on both protocols: an HTTP code and the gRPC code that stands for it.
type Status struct {
	HTTP int
	GRPC uint32
}

// OK is the status of a successful request.
var OK = Status{HTTP: 200, GRPC: 0}

// grpcNames are the gRPC status code names, indexed by code.
var grpcNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
	"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// grpcToHTTP follows google.rpc.Code's documented HTTP mapping.
var grpcToHTTP = [...]int{200, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501, 500, 503, 500, 401}

// GRPCName returns the name of a gRPC code ("UNAVAILABLE").
func GRPCName(code uint32) string {
	if int(code) < len(grpcNames) {
		return grpcNames[code]
	}
	return "CODE_" + strconv.Itoa(int(code))
}

// HTTPFromGRPC returns the HTTP status that stands for a gRPC code (UNAVAILABLE → 503).
func HTTPFromGRPC(code uint32) int {
	if int(code) < len(grpcToHTTP) {
		return grpcToHTTP[code]
	}
	return 500
}

// GRPCFromHTTP returns the gRPC code that stands for an HTTP status (503 → UNAVAILABLE, 429 →
// RESOURCE_EXHAUSTED, 504 → DEADLINE_EXCEEDED).
func GRPCFromHTTP(code int) uint32 {
	switch code {
	case 200:
		return 0
	case 400:
		return 3
	case 401:
		return 16
	case 403:
		return 7
	case 404:
		return 5
	case 409:
		return 10
	case 429:
		return 8
	case 499:
		return 1
	case 500:
		return 13
	case 501:
		return 12
	case 502, 503:
		return 14
	case 504:
		return 4
	}
	if code >= 200 && code < 300 {
		return 0
	}
	return 2 // UNKNOWN
}

// StatusFromHTTP returns the Status for an HTTP code.
func StatusFromHTTP(code int) Status { return Status{HTTP: code, GRPC: GRPCFromHTTP(code)} }

// ParseStatus parses an HTTP code ("503") or a gRPC code name ("UNAVAILABLE", any case).
func ParseStatus(s string) (Status, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.Atoi(t); err == nil {
		if n >= 100 && n < 200 {
			// A 1xx is informational: written as the final answer, an HTTP/1.1 caller waits for the real one
			// until it times out, while the server counts a success.
			return Status{}, fmt.Errorf("HTTP status %d is informational (1xx): a server cannot answer a request with it; want 200-599", n)
		}
		if n < 200 || n > 599 {
			return Status{}, fmt.Errorf("HTTP status %d outside 200-599", n)
		}
		return StatusFromHTTP(n), nil
	}
	up := strings.ToUpper(t)
	for code, name := range grpcNames {
		if name == up {
			return Status{HTTP: grpcToHTTP[code], GRPC: uint32(code)}, nil
		}
	}
	return Status{}, fmt.Errorf("unknown status %q (want an HTTP code such as 503 or a gRPC code name such as UNAVAILABLE)", s)
}

// StatusMix injects statuses with given probabilities; the remainder succeeds. The zero value always succeeds.
type StatusMix struct {
	statuses []Status
	cum      []float64 // cumulative probabilities, last <= 1
}

// IsZero reports whether the mix never injects anything.
func (m StatusMix) IsZero() bool { return len(m.statuses) == 0 }

// Pick draws a status. A mix that injects nothing draws nothing from r.
func (m *StatusMix) Pick(r *rand.Rand) Status {
	if len(m.statuses) == 0 {
		return OK
	}
	u := r.Float64()
	for i, c := range m.cum {
		if u < c {
			return m.statuses[i]
		}
	}
	return OK
}

// Probability returns the total probability of injected (non-2xx) statuses.
func (m StatusMix) Probability() float64 {
	if len(m.cum) == 0 {
		return 0
	}
	return m.cum[len(m.cum)-1]
}

// ParseStatusMix parses a document's status map ({"503": "1%"}). Keys are sorted so that a seeded draw does
// not depend on map order. Errors name the offending key. 200 (or OK) is refused: it is what the requests the
// mix does not pick get, so listing it would only count successes as injected.
func ParseStatusMix(in map[string]string) (StatusMix, map[string]error) {
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var m StatusMix
	var errs map[string]error
	fail := func(k string, err error) {
		if errs == nil {
			errs = map[string]error{}
		}
		errs[k] = err
	}
	var total float64
	for _, k := range keys {
		st, err := ParseStatus(k)
		if err != nil {
			fail(k, err)
			continue
		}
		if st == OK {
			fail(k, fmt.Errorf("%s is what every request the mix does not pick gets: list only the statuses to inject", k))
			continue
		}
		p, err := ParsePercent(in[k])
		if err != nil {
			fail(k, err)
			continue
		}
		total += p
		m.statuses = append(m.statuses, st)
		m.cum = append(m.cum, total)
	}
	if errs == nil && total > 1+1e-9 {
		fail("", fmt.Errorf("status percentages add up to %.4g%%, more than 100%%", total*100))
	}
	return m, errs
}

// ParseStatusList parses the fortio query form "503:10,429:1" (percentages) or a single "503" (always).
func ParseStatusList(s string) (StatusMix, error) {
	var m StatusMix
	var total float64
	for _, part := range strings.Split(s, ",") {
		code, pct, hasPct := strings.Cut(strings.TrimSpace(part), ":")
		st, err := ParseStatus(code)
		if err != nil {
			return StatusMix{}, err
		}
		p := 1.0
		if hasPct {
			if p, err = ParsePercent(pct); err != nil {
				return StatusMix{}, err
			}
		}
		total += p
		m.statuses = append(m.statuses, st)
		m.cum = append(m.cum, total)
	}
	if total > 1+1e-9 {
		return StatusMix{}, fmt.Errorf("status percentages in %q add up to more than 100%%", s)
	}
	return m, nil
}
