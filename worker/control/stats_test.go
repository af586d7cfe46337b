package control_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/control"
	"google.golang.org/protobuf/proto"
)

func TestStatsWindows(t *testing.T) {
	svc, w := newService(t, baseConfig(), "")
	addr := w.DataAddr()
	serve := func(n int) {
		t.Helper()
		for range n {
			hit(t, addr)
		}
	}
	// A request is counted as it ends, which may be just after the client has its response.
	counted := func(n int64) {
		t.Helper()
		if !eventually(2*time.Second, func() bool { return inbound(svc.Stats(false)) == n }) {
			t.Fatalf("window counts %d requests after 2s, want %d", inbound(svc.Stats(false)), n)
		}
	}

	serve(3)
	counted(3)
	first := svc.Stats(true)
	if inbound(first) != 3 || first.GetConfigVersion() != 1 || first.GetWorker() != "api" || first.GetSeed() != 42 {
		t.Errorf("Stats(reset) = %d requests, version %d, worker %q, seed %d; want 3, 1, api, 42",
			inbound(first), first.GetConfigVersion(), first.GetWorker(), first.GetSeed())
	}
	second := svc.Stats(false)
	if inbound(second) != 0 {
		t.Errorf("the window after a reset counts %d requests, want 0", inbound(second))
	}
	if !proto.Equal(second.GetWindowStart(), first.GetWindowEnd()) {
		t.Errorf("new window starts at %v, want the end of the last one, %v",
			second.GetWindowStart().AsTime(), first.GetWindowEnd().AsTime())
	}

	st, err := svc.MergePatch([]byte(`{"serve": {"delay": "2ms"}}`))
	if err != nil {
		t.Fatal(err)
	}
	serve(2)
	counted(2)
	third := svc.Stats(false)
	if !proto.Equal(third.GetWindowStart(), first.GetWindowEnd()) {
		t.Errorf("a read without reset moved the window start to %v", third.GetWindowStart().AsTime())
	}
	if third.GetConfigVersion() != st.GetVersion() || !proto.Equal(third.GetConfigChangedAt(), st.GetChangedAt()) {
		t.Errorf("snapshot config version %d at %v, want %d at %v", third.GetConfigVersion(),
			third.GetConfigChangedAt().AsTime(), st.GetVersion(), st.GetChangedAt().AsTime())
	}
}

func TestLoadRunsAndStops(t *testing.T) {
	svc, w := newService(t, baseConfig(), "")
	load := func(s *irsv1.StatsSnapshot) *irsv1.LoadStats {
		for _, l := range s.GetLoad() {
			if l.GetTarget() == "self" {
				return l
			}
		}
		return nil
	}
	if _, err := svc.StartLoad(&irsv1.Load{Target: "self", Endpoints: []string{w.DataAddr()}, Rate: 50}); err != nil {
		t.Fatal(err)
	}
	if !eventually(2*time.Second, func() bool {
		l := load(svc.Stats(false))
		return l.GetRunning() && l.GetOutcomes().GetStatuses()[200] > 0
	}) {
		t.Fatalf("load not running with answered requests 2s after StartLoad: %v", load(svc.Stats(false)))
	}
	if _, err := svc.StopLoad(); err != nil {
		t.Fatal(err)
	}
	if !eventually(2*time.Second, func() bool { return !load(svc.Stats(false)).GetRunning() }) {
		t.Errorf("load still running 2s after StopLoad: %v", load(svc.Stats(false)))
	}
}

// stream runs StreamStats until it has sent n snapshots (or 3s passed), then cancels it; between, when set, is
// called after each snapshot. It returns the snapshots, how long the first n took, and StreamStats' error.
func stream(t *testing.T, svc *control.Service, interval time.Duration, cumulative bool, n int,
	between func(i int)) ([]*irsv1.StatsSnapshot, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := make(chan *irsv1.StatsSnapshot, 64)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- svc.StreamStats(ctx, interval, cumulative, time.Time{}, nil, func(s *irsv1.StatsSnapshot) error {
			select {
			case snaps <- s:
			default:
				return errors.New("test is not reading")
			}
			return nil
		})
	}()
	var got []*irsv1.StatsSnapshot
	var took time.Duration
	timeout := time.After(3 * time.Second)
	for len(got) < n {
		select {
		case s := <-snaps:
			got = append(got, s)
			if between != nil {
				between(len(got))
			}
		case <-timeout:
			t.Fatalf("%d snapshots in 3s at %v, want %d", len(got), interval, n)
		}
	}
	took = time.Since(start)
	cancel()
	select {
	case err := <-done:
		return got, took, err
	case <-time.After(time.Second):
		t.Fatal("StreamStats did not return within 1s of the cancellation")
	}
	return nil, 0, nil
}

func TestStreamStats(t *testing.T) {
	t.Run("one snapshot per interval", func(t *testing.T) {
		svc, _ := newService(t, baseConfig(), "")
		snaps, took, err := stream(t, svc, control.MinStreamInterval, false, 5, nil)
		if err != nil {
			t.Errorf("StreamStats after cancellation = %v, want nil", err)
		}
		// Five ticks of a 100ms ticker cannot come before 500ms.
		if took < 450*time.Millisecond {
			t.Errorf("5 snapshots in %v at 100ms: faster than one per interval", took)
		}
		for i := 1; i < len(snaps); i++ {
			if !proto.Equal(snaps[i].GetWindowStart(), snaps[i-1].GetWindowEnd()) {
				t.Errorf("snapshot %d starts at %v, want the end of the previous, %v", i,
					snaps[i].GetWindowStart().AsTime(), snaps[i-1].GetWindowEnd().AsTime())
			}
		}
	})
	t.Run("aligned windows end on the boundaries of the alignment", func(t *testing.T) {
		svc, _ := newService(t, baseConfig(), "")
		const interval = 200 * time.Millisecond
		align := time.Now().Add(-130 * time.Millisecond) // the first boundary is 70ms away
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var ends []time.Time
		err := svc.StreamStats(ctx, interval, false, align, nil, func(s *irsv1.StatsSnapshot) error {
			if ends = append(ends, s.GetWindowEnd().AsTime()); len(ends) == 4 {
				cancel()
			}
			return nil
		})
		if err != nil {
			t.Fatalf("StreamStats = %v", err)
		}
		// Window k ends in slot k after align: at or after its boundary, within an interval of it (timer
		// latency), never drifting into the next slot.
		for k, end := range ends {
			slot := int(end.Sub(align) / interval)
			if slot != k+1 {
				t.Errorf("window %d ends %v after align: slot %d, want %d (boundary %v)", k, end.Sub(align), slot,
					k+1, time.Duration(k+1)*interval)
			}
		}
	})
	t.Run("each interval counts its own requests", func(t *testing.T) {
		svc, w := newService(t, baseConfig(), "")
		counts := func(cumulative bool) []int64 {
			snaps, _, _ := stream(t, svc, control.MinStreamInterval, cumulative, 8, func(i int) {
				if i == 1 {
					hit(t, w.DataAddr())
					hit(t, w.DataAddr())
				}
			})
			out := make([]int64, len(snaps))
			for i, s := range snaps {
				out[i] = inbound(s)
			}
			return out
		}
		perInterval := counts(false)
		var sum int64
		for _, c := range perInterval {
			sum += c
		}
		if sum != 2 || perInterval[0] != 0 || perInterval[len(perInterval)-1] != 0 {
			t.Errorf("per-interval counts %v: want the 2 requests once, after the first snapshot", perInterval)
		}
		cumulative := counts(true)
		if cumulative[0] != 0 || cumulative[len(cumulative)-1] != 2 || !slices.IsSorted(cumulative) {
			t.Errorf("cumulative counts %v: want 0 rising to 2", cumulative)
		}
	})
	t.Run("cancellation returns nil at once", func(t *testing.T) {
		svc, _ := newService(t, baseConfig(), "")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		sent := make(chan struct{}, 1)
		go func() {
			done <- svc.StreamStats(ctx, time.Hour, false, time.Time{}, nil, func(*irsv1.StatsSnapshot) error {
				sent <- struct{}{}
				return nil
			})
		}()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("StreamStats = %v, want nil", err)
			}
		case <-time.After(time.Second):
			t.Fatal("StreamStats did not return within 1s of the cancellation")
		}
		if len(sent) != 0 {
			t.Error("a snapshot was sent before the first interval")
		}
	})
	t.Run("send error ends the stream", func(t *testing.T) {
		svc, _ := newService(t, baseConfig(), "")
		boom := errors.New("client gone")
		done := make(chan error, 1)
		go func() {
			done <- svc.StreamStats(context.Background(), control.MinStreamInterval, false, time.Time{}, nil,
				func(*irsv1.StatsSnapshot) error { return boom })
		}()
		select {
		case err := <-done:
			if !errors.Is(err, boom) {
				t.Errorf("StreamStats = %v, want the send error", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("StreamStats still running 2s after its send failed")
		}
	})
	t.Run("interval below the minimum", func(t *testing.T) {
		svc, _ := newService(t, baseConfig(), "")
		for _, d := range []time.Duration{0, -time.Second, control.MinStreamInterval - 1} {
			err := svc.StreamStats(context.Background(), d, false, time.Time{}, nil, func(*irsv1.StatsSnapshot) error {
				t.Errorf("interval %v: a snapshot was sent", d)
				return nil
			})
			if got := problems(t, err); !slices.Equal(got, []string{"interval@0:0"}) {
				t.Errorf("interval %v: problems %q, want one on interval", d, got)
			}
		}
	})
}
