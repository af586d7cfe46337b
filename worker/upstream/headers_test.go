package upstream_test

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/irs-sim/irs/worker/upstream"
)

func TestServerTimingRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		text string
		// want is d at the header's resolution (microseconds).
		want time.Duration
	}{
		{name: "zero", d: 0, text: "irs;dur=0.000", want: 0},
		{name: "sub-microsecond truncates", d: 999 * time.Nanosecond, text: "irs;dur=0.000", want: 0},
		{name: "one microsecond", d: time.Microsecond, text: "irs;dur=0.001", want: time.Microsecond},
		{name: "milliseconds", d: 12345 * time.Microsecond, text: "irs;dur=12.345", want: 12345 * time.Microsecond},
		{name: "nanoseconds dropped", d: 12345678 * time.Nanosecond, text: "irs;dur=12.345", want: 12345 * time.Microsecond},
		{name: "seconds", d: 3*time.Second + 7*time.Microsecond, text: "irs;dur=3000.007", want: 3*time.Second + 7*time.Microsecond},
		{name: "an hour", d: time.Hour, text: "irs;dur=3600000.000", want: time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := upstream.AppendServerTiming([]byte("prefix "), tt.d)
			if got := string(v); got != "prefix "+tt.text {
				t.Fatalf("AppendServerTiming(%v) = %q, want %q", tt.d, got, "prefix "+tt.text)
			}
			got, ok := upstream.ParseServerTiming(v[len("prefix "):])
			if !ok || got != tt.want {
				t.Errorf("ParseServerTiming(%q) = %v, %v; want %v, true", tt.text, got, ok, tt.want)
			}
		})
	}
}

// TestServerTimingDigits: the value is what strconv.AppendFloat(ms, 'f', 3) wrote before it was written digit by
// digit, for every microsecond up to 3 ms, a few larger values and negative ones (a clock stepped back).
func TestServerTimingDigits(t *testing.T) {
	check := func(us int64) {
		d := time.Duration(us) * time.Microsecond
		want := strconv.AppendFloat([]byte("irs;dur="), float64(us)/1000, 'f', 3, 64)
		if got := upstream.AppendServerTiming(nil, d); !bytes.Equal(got, want) {
			t.Fatalf("AppendServerTiming(%v) = %q, want %q", d, got, want)
		}
	}
	for us := int64(-3000); us <= 3000; us++ {
		check(us)
	}
	for _, us := range []int64{999_999, 1_000_000, 123_456_789, 3_600_000_000, 1 << 40} {
		check(us)
		check(-us)
	}
}

func TestParseServerTiming(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{name: "irs with fraction", in: "irs;dur=12.345", want: 12345 * time.Microsecond, ok: true},
		{name: "irs integer milliseconds", in: "irs;dur=5", want: 5 * time.Millisecond, ok: true},
		{name: "one fraction digit", in: "irs;dur=7.5", want: 7500 * time.Microsecond, ok: true},
		{name: "leading dot", in: "irs;dur=.25", want: 250 * time.Microsecond, ok: true},
		{name: "trailing dot", in: "irs;dur=5.", want: 5 * time.Millisecond, ok: true},
		{name: "digits past microseconds truncate", in: "irs;dur=1.23456", want: 1234 * time.Microsecond, ok: true},
		{name: "zero", in: "irs;dur=0", want: 0, ok: true},
		{name: "stops at the next parameter", in: "irs;dur=3.5;desc=x", want: 3500 * time.Microsecond, ok: true},
		{name: "stops at the next metric", in: "irs;dur=2, cdn;desc=hit", want: 2 * time.Millisecond, ok: true},
		{name: "a second dot is malformed", in: "irs;dur=1.2.3", ok: false},
		{name: "metric without dur before", in: "cache;desc=hit, irs;dur=4.5", want: 4500 * time.Microsecond, ok: true},
		{name: "metric with dur before", in: "db;dur=3, irs;dur=7", want: 7 * time.Millisecond, ok: true},
		{name: "only another metric's dur", in: "edge;dur=9", ok: false},
		{name: "empty", in: "", ok: false},
		{name: "junk", in: "junk", ok: false},
		{name: "dur without value", in: "irs;dur=", ok: false},
		{name: "dur with letters", in: "irs;dur=abc", ok: false},
		{name: "negative", in: "irs;dur=-5", ok: false},
		{name: "name without dur", in: "irs", ok: false},
		{name: "truncated key", in: "irs;du", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := upstream.ParseServerTiming([]byte(tt.in))
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("ParseServerTiming(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
	t.Run("does not allocate", func(t *testing.T) {
		v := []byte("cache;desc=hit, irs;dur=12.345")
		if n := testing.AllocsPerRun(100, func() { upstream.ParseServerTiming(v) }); n != 0 {
			t.Errorf("ParseServerTiming allocates %v times per call, want 0", n)
		}
	})
}

const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"

func TestParseTraceParent(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		traceID string
		sampled bool
		ok      bool
	}{
		{name: "sampled", in: "00-" + traceID + "-00f067aa0ba902b7-01", traceID: traceID, sampled: true, ok: true},
		{name: "not sampled", in: "00-" + traceID + "-00f067aa0ba902b7-00", traceID: traceID, sampled: false, ok: true},
		{name: "sampled with random flag", in: "00-" + traceID + "-00f067aa0ba902b7-03", traceID: traceID, sampled: true, ok: true},
		{name: "random flag only", in: "00-" + traceID + "-00f067aa0ba902b7-02", traceID: traceID, sampled: false, ok: true},
		{name: "sampled with an unknown high flag", in: "00-" + traceID + "-00f067aa0ba902b7-09", traceID: traceID,
			sampled: true, ok: true},
		{name: "empty", in: "", ok: false},
		{name: "too short", in: "00-" + traceID + "-00f067aa0ba902b7-0", ok: false},
		{name: "too long", in: "00-" + traceID + "-00f067aa0ba902b7-01-", ok: false},
		{name: "dash misplaced", in: "00_" + traceID + "-00f067aa0ba902b7-01", ok: false},
		{name: "junk of the right length", in: "0123456789012345678901234567890123456789012345678901234", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, sampled, ok := upstream.ParseTraceParent([]byte(tt.in))
			if ok != tt.ok || string(id) != tt.traceID || sampled != tt.sampled {
				t.Errorf("ParseTraceParent(%q) = %q, %v, %v; want %q, %v, %v", tt.in, id, sampled, ok, tt.traceID, tt.sampled, tt.ok)
			}
		})
	}
}

// isHex reports whether s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func TestAppendTraceParent(t *testing.T) {
	tests := []struct {
		name    string
		prop    upstream.Propagation
		keepsID bool
	}{
		{name: "continues a sampled trace", prop: upstream.Propagation{TraceID: []byte(traceID), Sampled: true}, keepsID: true},
		{name: "continues an unsampled trace", prop: upstream.Propagation{TraceID: []byte(traceID)}, keepsID: true},
		{name: "starts a trace", prop: upstream.Propagation{Sampled: true}},
		{name: "starts a trace for a malformed id", prop: upstream.Propagation{TraceID: []byte("abc")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const n = 100
			spans := map[string]bool{}
			traces := map[string]bool{}
			for range n {
				v := upstream.AppendTraceParent([]byte("x"), &tt.prop)
				if v[0] != 'x' {
					t.Fatalf("AppendTraceParent overwrote dst: %q", v)
				}
				tp := string(v[1:])
				id, sampled, ok := upstream.ParseTraceParent(v[1:])
				if !ok || tp[:3] != "00-" || !isHex(string(id), 32) || !isHex(tp[36:52], 16) {
					t.Fatalf("AppendTraceParent = %q, not a W3C traceparent", tp)
				}
				if sampled != tt.prop.Sampled {
					t.Errorf("%q: sampled = %v, want %v", tp, sampled, tt.prop.Sampled)
				}
				if tt.keepsID && string(id) != traceID {
					t.Errorf("%q: trace id %q, want %q", tp, id, traceID)
				}
				spans[tp[36:52]] = true
				traces[string(id)] = true
			}
			if len(spans) != n {
				t.Errorf("%d distinct span ids in %d traceparents, want a new one each time", len(spans), n)
			}
			if want := map[bool]int{true: 1, false: n}[tt.keepsID]; len(traces) != want {
				t.Errorf("%d distinct trace ids in %d traceparents, want %d", len(traces), n, want)
			}
		})
	}
}

func TestAppendRequestID(t *testing.T) {
	const n = 1000
	ids := map[string]bool{}
	for range n {
		v := upstream.AppendRequestID([]byte("id:"))
		if !bytes.HasPrefix(v, []byte("id:")) {
			t.Fatalf("AppendRequestID overwrote dst: %q", v)
		}
		id := string(v[3:])
		if !isHex(id, 32) {
			t.Fatalf("AppendRequestID = %q, want 32 lowercase hex digits", id)
		}
		if b, _ := hex.DecodeString(id); bytes.Equal(b, make([]byte, 16)) {
			t.Fatalf("AppendRequestID = %q, all zero", id)
		}
		ids[id] = true
	}
	if len(ids) != n {
		t.Errorf("%d distinct ids in %d, want all distinct", len(ids), n)
	}
}
