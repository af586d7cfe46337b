package telemetry_test

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statsdLine is one parsed DogStatsD metric line.
type statsdLine struct {
	name  string
	value float64
	typ   string // c, g, ...
	tags  []string
}

// parseStatsD parses "name:value|type[|@rate][|#tag,tag][|c:container][|e:env][|card:x][|Tts]".
func parseStatsD(s string) (statsdLine, error) {
	parts := strings.Split(s, "|")
	if len(parts) < 2 {
		return statsdLine{}, fmt.Errorf("no type in %q", s)
	}
	name, value, ok := strings.Cut(parts[0], ":")
	if !ok || name == "" {
		return statsdLine{}, fmt.Errorf("no name:value in %q", s)
	}
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return statsdLine{}, fmt.Errorf("value of %q: %w", s, err)
	}
	l := statsdLine{name: name, value: v, typ: parts[1]}
	for _, p := range parts[2:] {
		switch {
		case strings.HasPrefix(p, "#"):
			l.tags = strings.Split(p[1:], ",")
		case strings.HasPrefix(p, "@"), strings.HasPrefix(p, "c:"), strings.HasPrefix(p, "e:"),
			strings.HasPrefix(p, "card:"), strings.HasPrefix(p, "T"):
		default:
			return statsdLine{}, fmt.Errorf("unknown field %q in %q", p, s)
		}
	}
	return l, nil
}

// has reports whether the line carries every one of tags.
func (l statsdLine) has(tags ...string) bool {
	for _, t := range tags {
		if !slices.Contains(l.tags, t) {
			return false
		}
	}
	return true
}

// statsdAgent is a DogStatsD agent on loopback UDP that keeps every line it receives.
type statsdAgent struct {
	conn  net.PacketConn
	lines []statsdLine
}

func listenStatsD(t *testing.T) *statsdAgent {
	t.Helper()
	// The client adds DD_* variables of the environment as tags; the test asserts the exact tag sets.
	for _, v := range []string{"DD_ENTITY_ID", "DD_ENV", "DD_SERVICE", "DD_VERSION"} {
		t.Setenv(v, "")
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &statsdAgent{conn: conn}
}

func (a *statsdAgent) addr() string { return a.conn.LocalAddr().String() }

// readUntil reads packets until done is true (checked after each packet) or timeout passes.
func (a *statsdAgent) readUntil(t *testing.T, timeout time.Duration, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 64<<10)
	for !done() {
		if err := a.conn.SetReadDeadline(deadline); err != nil {
			t.Fatal(err)
		}
		n, _, err := a.conn.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s: not received within %v; received %d lines:\n%s", what, timeout, len(a.lines), a.dump())
			}
			t.Fatal(err)
		}
		a.add(t, buf[:n])
	}
}

// drain reads what has already arrived: packets until none comes for idle.
func (a *statsdAgent) drain(t *testing.T, idle time.Duration) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for range 10_000 {
		if err := a.conn.SetReadDeadline(time.Now().Add(idle)); err != nil {
			t.Fatal(err)
		}
		n, _, err := a.conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		a.add(t, buf[:n])
	}
	t.Fatal("packets keep arriving")
}

// quiet asserts that nothing arrives for d.
func (a *statsdAgent) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	buf := make([]byte, 64<<10)
	if err := a.conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	if n, _, err := a.conn.ReadFrom(buf); err == nil {
		t.Fatalf("received %q, want nothing yet", buf[:n])
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
}

func (a *statsdAgent) add(t *testing.T, packet []byte) {
	t.Helper()
	for _, s := range strings.Split(strings.TrimRight(string(packet), "\n"), "\n") {
		l, err := parseStatsD(s)
		if err != nil {
			t.Fatalf("parse DogStatsD line: %v", err)
		}
		a.lines = append(a.lines, l)
	}
}

func (a *statsdAgent) dump() string {
	var b strings.Builder
	for _, l := range a.lines {
		fmt.Fprintf(&b, "  %s:%v|%s|#%s\n", l.name, l.value, l.typ, strings.Join(l.tags, ","))
	}
	return b.String()
}

// sum adds the values of the count lines named name that carry exactly tags.
func (a *statsdAgent) sum(name string, tags []string) (total float64) {
	for _, l := range a.lines {
		if l.typ == "c" && l.name == name && sameTagSet(l.tags, tags) {
			total += l.value
		}
	}
	return total
}

// gauges returns the values of the gauge lines named name that carry exactly tags, in arrival order.
func (a *statsdAgent) gauges(name string, tags []string) []float64 {
	var out []float64
	for _, l := range a.lines {
		if l.typ == "g" && l.name == name && sameTagSet(l.tags, tags) {
			out = append(out, l.value)
		}
	}
	return out
}

// any reports whether some line carries every one of tags.
func (a *statsdAgent) any(tags ...string) bool {
	return slices.ContainsFunc(a.lines, func(l statsdLine) bool { return l.has(tags...) })
}

func sameTagSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, t := range b {
		if !slices.Contains(a, t) {
			return false
		}
	}
	return true
}

// countNames are the DogStatsD metrics sent as counts; every other IRS metric is a gauge.
var countNames = map[string]bool{
	"irs.server.requests": true, "irs.client.requests": true, "irs.client.retries": true, "irs.load.requests": true,
	"irs.load.sent": true, "irs.load.late": true, "irs.load.blocked": true, "irs.load.unsent": true,
}

// checkLines asserts what every line must be: an irs. name of the right type, each tag key once, the worker's
// base tags, exactly one series tag, and on request counts exactly one of status and error.
func checkLines(t *testing.T, lines []statsdLine, base []string) {
	t.Helper()
	for _, l := range lines {
		if !strings.HasPrefix(l.name, "irs.") {
			t.Errorf("%s: not in the irs. namespace", l.name)
		}
		if want := map[bool]string{true: "c", false: "g"}[countNames[l.name]]; l.typ != want {
			t.Errorf("%s is sent as %q, want %q", l.name, l.typ, want)
		}
		if !l.has(base...) {
			t.Errorf("%s #%v lacks base tags %v", l.name, l.tags, base)
		}
		keys := map[string]int{}
		for _, tag := range l.tags {
			k, _, _ := strings.Cut(tag, ":")
			keys[k]++
		}
		for k, n := range keys {
			if n > 1 {
				t.Errorf("%s #%v: tag %s %d times", l.name, l.tags, k, n)
			}
		}
		if n := keys["route"] + keys["upstream"] + keys["target"]; n != 1 {
			t.Errorf("%s #%v: %d series tags, want one of route, upstream, target", l.name, l.tags, n)
		}
		outcome := keys["status"] + keys["error"]
		if strings.HasSuffix(l.name, ".requests") != (outcome == 1) || outcome > 1 {
			t.Errorf("%s #%v: %d status/error tags", l.name, l.tags, outcome)
		}
	}
}

// near reports whether got is want within HDR precision (0.2%).
func near(got, want float64) bool { return math.Abs(got-want) <= math.Abs(want)*2e-3 }

// tagsOf is base plus extra.
func tagsOf(base []string, extra ...string) []string { return append(slices.Clone(base), extra...) }
