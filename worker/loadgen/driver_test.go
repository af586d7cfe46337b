package loadgen

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/irs-sim/irs/worker/stats"
)

// runLoad runs a generator to completion and returns its series.
func runLoad(t *testing.T, cfg Config, send SendFunc) *stats.Load {
	t.Helper()
	reg := stats.NewRegistry("t", 1)
	rec := reg.Load("target")
	g := Start(context.Background(), cfg, send, rec)
	select {
	case <-g.Done():
	case <-time.After(cfg.Duration + 10*time.Second):
		g.Stop()
		t.Fatal("generator did not end after its duration")
	}
	return rec
}

func ok(context.Context, time.Time) Result { return Result{Status: 200} }

// books returns what a snapshot of rec says was due, sent and unsent, and checks that due = sent + unsent.
func books(t *testing.T, reg *stats.Registry) (due, sent, unsent int64) {
	t.Helper()
	ls := reg.Snapshot().GetLoad()[0]
	due, sent, unsent = ls.GetDue(), ls.GetSent(), ls.GetUnsent()
	if due != sent+unsent || unsent < 0 {
		t.Errorf("due %d != sent %d + unsent %d", due, sent, unsent)
	}
	return due, sent, unsent
}

// checkBooks asserts the accounting identities of a finished run: due = sent + unsent, nothing sent that was
// not due.
func checkBooks(t *testing.T, rec *stats.Load) {
	t.Helper()
	due, sent := rec.Due(time.Now()), rec.Sent.Load()
	if sent > due {
		t.Errorf("sent %d > due %d", sent, due)
	}
}

// lateness is what a reference sleeper saw of this machine while something else ran.
type lateness struct {
	// share is the share of its 500µs sleeps that overslept by more than the bound asked for.
	share float64
	// worst is its longest oversleep: the longest the machine kept a due goroutine waiting.
	worst time.Duration
	// lateTime sums its oversleeps beyond the bound: how long something due could not have started in time.
	lateTime time.Duration
}

// machineLateness measures, while fn runs, how late this machine wakes a sleeping goroutine: how often more
// than late after its time, and at worst.
func machineLateness(late time.Duration, fn func()) lateness {
	done := make(chan struct{})
	var n, over int
	var worst, lateTime time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			want := time.Now().Add(500 * time.Microsecond)
			time.Sleep(500 * time.Microsecond)
			n++
			overslept := time.Since(want)
			worst = max(worst, overslept)
			if overslept > late {
				over++
				lateTime += overslept - late
			}
		}
	})
	fn()
	close(done)
	wg.Wait()
	return lateness{share: float64(over) / float64(max(n, 1)), worst: worst, lateTime: lateTime}
}

// TestOpenLoopRate: the generator counts exactly the requests due, sends none that was not due, and accounts for
// every send: each sent is late or on time, and each it slept for has its lateness recorded. How punctual it is
// (how many of its sends were late) is the machine's as much as its own, and a busy machine makes it anything: a
// loaded CI machine once failed a bound of "2 % + twice a reference sleeper's share" at 5.0 % (the sleeper,
// stalled once, counts one late wake-up where the generator has every request due meanwhile late). Punctuality
// is measured in BenchmarkOpenLoopPunctuality, beside a reference sleeper weighted by time, as `make bench` does.
func TestOpenLoopRate(t *testing.T) {
	const rate = 2000
	rec := runLoad(t, Config{Schedule: must(Constant(rate)), Duration: time.Second, Connections: 8, LateAfter: 5 * time.Millisecond}, ok)
	checkBooks(t, rec)
	sent, due := rec.Sent.Load(), rec.Due(time.Now())
	if due != rate {
		t.Errorf("%d due in 1s at %d/s, want exactly %d", due, rate, rate)
	}
	if sent == 0 {
		t.Fatalf("nothing sent of %d due", due)
	}
	if late := rec.Late.Load(); late > sent {
		t.Errorf("%d late of %d sent", late, sent)
	}
	if n := rec.Lateness.Snapshot().TotalCount(); n != sent-rec.Blocked.Load() {
		t.Errorf("lateness recorded for %d sends, want every one it slept for: %d sent less %d blocked", n, sent, rec.Blocked.Load())
	}
}

// BenchmarkOpenLoopPunctuality: how many of a 2000 req/s generator's sends start more than 5 ms late, beside how
// much of the time a reference sleeper measured meanwhile could not have woken within 5 ms (its oversleeps
// beyond 5 ms summed over the run: a stall makes every request due in it late, and the sleeper once). A
// generator no less punctual than the machine reads late-% ≈ machine-late-%.
func BenchmarkOpenLoopPunctuality(b *testing.B) {
	const rate, bound = 2000, 5 * time.Millisecond
	var late, sent, machine float64
	for range b.N {
		var rec *stats.Load
		ref := machineLateness(bound, func() {
			reg := stats.NewRegistry("b", 1)
			rec = reg.Load("target")
			g := Start(context.Background(), Config{Schedule: must(Constant(rate)), Duration: time.Second, Connections: 8, LateAfter: bound}, ok, rec)
			<-g.Done()
		})
		late, sent, machine = late+float64(rec.Late.Load()), sent+float64(rec.Sent.Load()), machine+ref.lateTime.Seconds()
	}
	b.ReportMetric(100*late/max(sent, 1), "late-%")
	b.ReportMetric(100*machine/float64(b.N), "machine-late-%")
}

func TestOpenLoopPoissonRate(t *testing.T) {
	rec := runLoad(t, Config{Schedule: must(Constant(2000)), Poisson: true, Seed: 3, Duration: time.Second, Connections: 8, LateAfter: time.Second}, ok)
	checkBooks(t, rec)
	// Poisson count in 1 s at 2000/s: sd = sqrt(2000) ≈ 45; allow 5 sd.
	if sent := rec.Sent.Load(); sent < 2000-225 || sent > 2000+225 {
		t.Errorf("sent %d, want about 2000", sent)
	}
}

// TestCoordinatedOmission stalls every request that starts in a 500 ms window until the window ends, the
// way a paused server would. Latency from the intended send time must show the stall for every request due
// in the window; latency from the actual send time sees it only for the few requests in flight.
func TestCoordinatedOmission(t *testing.T) {
	start := time.Now()
	stallFrom, stallTo := start.Add(500*time.Millisecond), start.Add(time.Second)
	send := func(context.Context, time.Time) Result {
		if now := time.Now(); now.After(stallFrom) && now.Before(stallTo) {
			time.Sleep(time.Until(stallTo))
		}
		return Result{Status: 200}
	}
	rec := runLoad(t, Config{Schedule: must(Constant(1000)), Duration: 2 * time.Second, Connections: 4, LateAfter: time.Millisecond}, send)
	checkBooks(t, rec)
	lat := rec.Latency.Snapshot()
	unc := rec.Uncorrected.Snapshot()
	if p99 := lat.ValueAtPercentile(99); p99 < 300_000 {
		t.Errorf("corrected p99 = %dus, want >= 300ms (a quarter of the requests were due during a 500ms stall)", p99)
	}
	// What the machine adds to the uncorrected latency is its own; against the stall's it is small, however busy
	// the machine (an absolute 50 ms failed beside busy loops at 55.9 ms).
	corrected := lat.ValueAtPercentile(99)
	if p99 := unc.ValueAtPercentile(99); p99 > corrected/3 {
		t.Errorf("uncorrected p99 = %dus against a corrected %dus, want small beside it: only the requests in flight saw the stall", p99, corrected)
	}
	if b := rec.Blocked.Load(); b < 300 {
		t.Errorf("blocked = %d, want most of the ~500 requests due during the stall", b)
	}
	// The stall is the server's, not the generator's: the sends it held up (blocked) are not the generator's
	// lateness; the sends it slept for are, and they woke on time.
	late := rec.Lateness.Snapshot()
	if p99 := late.ValueAtPercentile(99); p99 > corrected/3 || late.TotalCount() != rec.Sent.Load()-rec.Blocked.Load() {
		t.Errorf("lateness p99 = %dus over %d sends, want small, over the %d sent less the %d blocked", p99, late.TotalCount(),
			rec.Sent.Load(), rec.Blocked.Load())
	}
}

func TestStopCountsUnsent(t *testing.T) {
	var inFlight, peak atomic.Int64
	send := func(context.Context, time.Time) Result {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
		inFlight.Add(-1)
		return Result{Status: 503}
	}
	reg := stats.NewRegistry("t", 1)
	rec := reg.Load("target")
	g := Start(context.Background(), Config{Schedule: must(Constant(1000)), Connections: 2, LateAfter: time.Millisecond}, send, rec)
	time.Sleep(500 * time.Millisecond)
	g.Stop()
	checkBooks(t, rec)
	if p := peak.Load(); p > 2 {
		t.Errorf("%d requests were in flight at once on 2 connections", p)
	}
	if u := rec.Due(time.Now()) - rec.Sent.Load(); u < 300 {
		t.Errorf("unsent = %d, want most of the ~500 due in 500ms on 2 slow connections", u)
	}
	snap := reg.Snapshot().Load[0]
	if snap.Outcomes.Requests != rec.Sent.Load() || snap.Outcomes.Statuses[503] != rec.Sent.Load() {
		t.Errorf("outcomes %v do not match %d sent", snap.Outcomes, rec.Sent.Load())
	}
	if snap.Running {
		t.Error("generator still reported running after Stop")
	}
}

func TestClosedLoop(t *testing.T) {
	var inFlight, peak atomic.Int64
	var busy atomic.Int64 // nanoseconds spent in sends, over every connection
	send := func(context.Context, time.Time) Result {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		start := time.Now()
		time.Sleep(time.Millisecond)
		busy.Add(int64(time.Since(start)))
		inFlight.Add(-1)
		return Result{Err: stats.ErrTimeout}
	}
	const connections, duration = 4, 300 * time.Millisecond
	start := time.Now()
	rec := runLoad(t, Config{Closed: true, Duration: duration, Connections: connections}, send)
	elapsed := time.Since(start)
	checkBooks(t, rec)
	// Closed: every connection sends again as soon as its last send returns, so its connections are busy with
	// sends nearly all the time, however long the machine makes each take (a busy machine's 1 ms sleeps take
	// several: a bound on the count, 600, failed there). At most 1200 (4 × 300 ms / 1 ms) either way.
	if p := peak.Load(); p != connections {
		t.Errorf("%d sends at once at most, want the %d connections'", p, connections)
	}
	if used, avail := time.Duration(busy.Load()), time.Duration(connections)*elapsed; used < avail/2 {
		t.Errorf("the connections were busy %v of their %v: not a closed loop", used, avail)
	}
	if sent := rec.Sent.Load(); sent == 0 || sent > connections*int64(duration/time.Millisecond) {
		t.Errorf("closed loop sent %d, want some, at most %d", sent, connections*int64(duration/time.Millisecond))
	}
	if n := rec.Lateness.Snapshot().TotalCount(); n != 0 {
		t.Errorf("closed loop recorded %d sends' lateness, want none: a closed loop has no schedule to be late for", n)
	}
}

// TestResultsRecorded: a proxy's status is counted apart, and the hop time (latency minus the target's service
// time) is recorded when the target reported one.
func TestResultsRecorded(t *testing.T) {
	var n atomic.Int64
	send := func(context.Context, time.Time) Result {
		time.Sleep(2 * time.Millisecond)
		if n.Add(1)%2 == 0 {
			return Result{Status: 503, FromProxy: true}
		}
		return Result{Status: 200, ServerTime: time.Millisecond, HasServerTime: true}
	}
	reg := stats.NewRegistry("t", 1)
	g := Start(context.Background(), Config{Schedule: must(Constant(100)), Duration: 300 * time.Millisecond,
		Connections: 4, LateAfter: time.Second}, send, reg.Load("target"))
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		g.Stop()
		t.Fatal("generator did not end after its duration")
	}
	ls := reg.Snapshot().GetLoad()[0]
	sent := ls.GetSent()
	if sent < 10 {
		t.Fatalf("%d requests sent, want about 30", sent)
	}
	if got := ls.GetOutcomes().GetProxyStatuses()[503]; got != sent/2 {
		t.Errorf("%d proxy 503s of %d requests, want %d", got, sent, sent/2)
	}
	hop := ls.GetHop()
	if want := sent - sent/2; hop.GetCount() != want {
		t.Errorf("%d hop times recorded, want %d (the responses with a service time)", hop.GetCount(), want)
	}
	// Each took at least 2ms and reported 1ms of service time: every hop is at least ~1ms.
	if hop.GetMinMs() < 0.9 {
		t.Errorf("shortest hop %.3fms, want at least ~1ms", hop.GetMinMs())
	}
}

// TestCoarsePacingSendsTicksAsBursts: coarse pacing sends each CoarseTick's requests together at its end (four
// per tick at 4000/s), and still sends every request due in the run.
func TestCoarsePacingSendsTicksAsBursts(t *testing.T) {
	const rate, n = 4000, 2000
	cfg := Config{Schedule: must(Constant(rate)), Duration: n * time.Second / rate, Connections: 8,
		LateAfter: 5 * time.Millisecond, Coarse: true}
	var rec *stats.Load
	ref := machineLateness(5*time.Millisecond, func() { rec = runLoad(t, cfg, ok) })
	checkBooks(t, rec)
	// Every request due is sent, but for those due while the machine kept the generator from running at the
	// very end (twice what a reference sleeper waited at worst, measured meanwhile): 1997 of 2000 on a busy one.
	due, sent := rec.Due(time.Now()), rec.Sent.Load()
	if most := 1 + int64((2*ref.worst+5*time.Millisecond).Seconds()*rate); due != n || n-sent > most {
		t.Errorf("sent %d requests of %d due, want all %d due in the run, at most %d unsent (the reference sleeper waited %v at worst)",
			sent, due, n, most, ref.worst)
	}

	// Responses arriving between ticks make the runtime check its timers often; a goroutine that keeps yielding
	// does the same here. Without the grid, the timers would then fire one by one, close to their due times.
	times := make([]time.Time, 0, n+10)
	var mu sync.Mutex
	send := func(_ context.Context, sent time.Time) Result {
		mu.Lock()
		times = append(times, sent)
		mu.Unlock()
		return Result{Status: 200}
	}
	busy, stopBusy := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(busy)
		for {
			select {
			case <-stopBusy:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	runLoad(t, cfg, send)
	close(stopBusy)
	<-busy
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	near := 0
	for i := 1; i < len(times); i++ {
		if times[i].Sub(times[i-1]) < 100*time.Microsecond {
			near++
		}
	}
	// Evenly paced, consecutive sends would be 250 µs apart; in bursts of four, three gaps in four are ~0.
	if frac := float64(near) / float64(len(times)-1); frac < 0.6 {
		t.Errorf("%.0f%% of consecutive sends less than 100µs apart, want >= 60%% (bursts of 4 per tick)", 100*frac)
	}
}

// slow is a send that takes d (a target that cannot keep up).
func slow(d time.Duration) SendFunc {
	return func(context.Context, time.Time) Result {
		time.Sleep(d)
		return Result{Status: 200}
	}
}

// TestSnapshotCountsTheBacklog: a snapshot taken while the generator is behind counts every request due by
// the snapshot's time, the ones not yet sent as unsent, so that a saturated generator shows as it happens.
func TestSnapshotCountsTheBacklog(t *testing.T) {
	for _, poisson := range []bool{false, true} {
		reg := stats.NewRegistry("t", 1)
		g := Start(context.Background(), Config{Schedule: must(Constant(1000)), Poisson: poisson, Seed: 7,
			Connections: 2, LateAfter: time.Millisecond}, slow(100*time.Millisecond), reg.Load("target"))
		time.Sleep(300 * time.Millisecond)
		before := time.Since(g.started())
		due, sent, unsent := books(t, reg)
		after := time.Since(g.started())
		g.Stop()
		// Uniform: exactly the arrivals before the snapshot; Poisson: their expected number (sd ≈ 17 at 300).
		lo, hi := int64(before.Seconds()*1000)-1, int64(after.Seconds()*1000)+1
		if poisson {
			lo, hi = lo-90, hi+90
		}
		if due < lo || due > hi {
			t.Errorf("poisson %v: due %d in a snapshot %v..%v after the start at 1000/s, want %d..%d", poisson, due, before, after, lo, hi)
		}
		if sent > 10 || unsent < due-10 {
			t.Errorf("poisson %v: sent %d, unsent %d of %d due; want at most ~6 sent on 2 connections of 100ms", poisson, sent, unsent, due)
		}
	}
}

// TestStopIsPromptAtAnyRate: a generator asked for far more than it can send stops at once, its backlog
// counted in constant time, and its snapshots count what was due up to their own time.
func TestStopIsPromptAtAnyRate(t *testing.T) {
	reg := stats.NewRegistry("t", 1)
	rec := reg.Load("target")
	g := Start(context.Background(), Config{Schedule: must(Constant(1e12)), Connections: 2, LateAfter: time.Millisecond},
		slow(time.Millisecond), rec)
	time.Sleep(200 * time.Millisecond)
	due, _, _ := books(t, reg)
	if due < 1e11 {
		t.Errorf("due %d in a snapshot 200ms into a run at 1e12/s, want > 1e11", due)
	}
	stopped := make(chan struct{})
	go func() { g.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return within 10s")
	}
	final, sent, _ := books(t, reg)
	time.Sleep(50 * time.Millisecond)
	if again, _, _ := books(t, reg); again != final {
		t.Errorf("due went on from %d to %d after Stop", final, again)
	}
	if final < due || sent > 500 {
		t.Errorf("due %d (was %d before Stop), sent %d", final, due, sent)
	}
	if reg.Snapshot().GetLoad()[0].GetRunning() {
		t.Error("still running after Stop")
	}
}

// TestOnScheduleAtALowRateShowsNoBacklog: a generator keeping to a slow Poisson schedule has nothing due and
// unsent at almost any snapshot, and is never behind by more than a wake-up: an expected fraction of an arrival
// is not a request (rounded up, it was a phantom backlog that made a 4/s generator look 1/4 s behind).
func TestOnScheduleAtALowRateShowsNoBacklog(t *testing.T) {
	reg := stats.NewRegistry("t", 1)
	g := Start(context.Background(), Config{Schedule: must(Constant(4)), Poisson: true, Seed: 11, Connections: 8,
		LateAfter: time.Millisecond}, slow(0), reg.Load("target"))
	defer g.Stop()
	const snapshots = 40
	withBacklog := 0
	var lags []float64
	ref := machineLateness(time.Millisecond, func() {
		for range snapshots {
			time.Sleep(37 * time.Millisecond)
			ls := reg.Snapshot().GetLoad()[0]
			if ls.GetUnsent() > 0 {
				withBacklog++
			}
			lags = append(lags, ls.GetLagMs())
		}
	})
	// On schedule, a snapshot catches a request only between its due time and its send: no longer than the
	// machine keeps a due goroutine waiting (a reference sleeper, measured meanwhile: on a busy machine a send
	// waited 270 ms once, beyond any fixed bound).
	bound := 50 + 2*float64(ref.worst)/float64(time.Millisecond)
	for i, lag := range lags {
		if lag > bound {
			t.Errorf("lag %.1fms at snapshot %d of a generator on schedule at 4/s, want at most %.0f ms (the reference sleeper waited %v at worst)",
				lag, i, bound, ref.worst)
		}
	}
	// Requests are due at 4/s: a backlog in most snapshots is one that is not there.
	if withBacklog > snapshots/4 {
		t.Errorf("%d of %d snapshots show a backlog at 4/s on 8 idle connections, want at most %d", withBacklog, snapshots, snapshots/4)
	}
}

// TestLagOfASaturatedGenerator: a generator whose connections are all busy reports how long its oldest unsent
// request has waited, which grows with the time it has been behind.
func TestLagOfASaturatedGenerator(t *testing.T) {
	reg := stats.NewRegistry("t", 1)
	g := Start(context.Background(), Config{Schedule: must(Constant(200)), Connections: 1,
		LateAfter: time.Millisecond}, slow(50*time.Millisecond), reg.Load("target"))
	defer g.Stop()
	time.Sleep(300 * time.Millisecond)
	first := reg.Snapshot().GetLoad()[0].GetLagMs()
	time.Sleep(300 * time.Millisecond)
	second := reg.Snapshot().GetLoad()[0].GetLagMs()
	// 1 connection of 50 ms at 200/s: 20/s sent, so the oldest unsent request is ~9/10 of the run old.
	if first < 150 || second < first+150 {
		t.Errorf("lag %.0fms at 0.3s and %.0fms at 0.6s into a run sending 1/10 of its schedule, want > 150ms and growing by > 150ms", first, second)
	}
}
