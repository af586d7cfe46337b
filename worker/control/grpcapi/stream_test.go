package grpcapi_test

import (
	"context"
	"google.golang.org/protobuf/types/known/timestamppb"
	"slices"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/control/grpcapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func TestStreamStats(t *testing.T) {
	e := newEnv(t, "")
	open := func(t *testing.T, req *irsv1.StreamStatsRequest) (context.CancelFunc, func() (*irsv1.StreamStatsResponse, error)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		s, err := e.client.StreamStats(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return cancel, s.Recv
	}

	t.Run("one snapshot per interval, ends cleanly on cancel", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		s, err := e.client.StreamStats(ctx, &irsv1.StreamStatsRequest{Interval: "100ms"})
		if err != nil {
			t.Fatal(err)
		}
		snaps := recvN(t, s, 5, 3*time.Second)
		// Five ticks of a 100ms ticker cannot come before 500ms.
		if took := time.Since(start); took < 450*time.Millisecond {
			t.Errorf("5 snapshots in %v at 100ms: faster than one per interval", took)
		}
		for i := 1; i < len(snaps); i++ {
			if !proto.Equal(snaps[i].GetWindowStart(), snaps[i-1].GetWindowEnd()) {
				t.Errorf("snapshot %d starts at %v, want the end of the previous, %v", i,
					snaps[i].GetWindowStart().AsTime(), snaps[i-1].GetWindowEnd().AsTime())
			}
		}
		cancel()
		if _, err := s.Recv(); code(t, err) != codes.Canceled {
			t.Errorf("Recv after cancel: %v, want CANCELED", err)
		}
		results, ok := e.streams.ended(2 * time.Second)
		if !ok {
			t.Fatal("the server's handler still runs 2s after the client cancelled")
		}
		if len(results) != 1 || results[0] != nil {
			t.Errorf("handlers returned %v, want one nil", results)
		}
	})

	t.Run("a second stream still works", func(t *testing.T) {
		cancel, recv := open(t, &irsv1.StreamStatsRequest{Interval: "100ms", Cumulative: true})
		first, err := recv()
		if err != nil {
			t.Fatal(err)
		}
		second, err := recv()
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(first.GetStats().GetWindowStart(), second.GetStats().GetWindowStart()) {
			t.Errorf("cumulative snapshots start at %v and %v, want the same start",
				first.GetStats().GetWindowStart().AsTime(), second.GetStats().GetWindowStart().AsTime())
		}
		cancel()
		if _, ok := e.streams.ended(2 * time.Second); !ok {
			t.Error("the server's handler still runs 2s after the client cancelled")
		}
	})

	t.Run("the header says the window is open, before the first snapshot", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := e.client.StreamStats(ctx, &irsv1.StreamStatsRequest{Interval: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		// Without the header sent as the window opens, Header waits for the first snapshot: an hour, past
		// the context's 5 s.
		md, err := s.Header()
		if err != nil {
			t.Fatalf("Header: %v (want it before the first snapshot, an hour away)", err)
		}
		if got := md.Get(grpcapi.StatsWindowOpen); len(got) != 1 {
			t.Errorf("header %v, want %s", md, grpcapi.StatsWindowOpen)
		}
		cancel()
		if _, ok := e.streams.ended(2 * time.Second); !ok {
			t.Error("the server's handler still runs 2s after the client cancelled")
		}
	})

	t.Run("default interval is 1s", func(t *testing.T) {
		cancel, recv := open(t, &irsv1.StreamStatsRequest{})
		defer cancel()
		start := time.Now()
		if _, err := recv(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 900*time.Millisecond || took > 3*time.Second {
			t.Errorf("first snapshot after %v, want about 1s", took)
		}
	})

	// An align a year-1 second made the handler count intervals one by one for longer than anyone waits, at most
	// of a core, after its client had gone. Times far from now are refused, and the handler ends.
	for name, align := range map[string]time.Time{
		"align in year 1":         time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC),
		"align in year 9999":      time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
		"align two days from now": time.Now().Add(48 * time.Hour),
	} {
		t.Run(name, func(t *testing.T) {
			cancel, recv := open(t, &irsv1.StreamStatsRequest{Interval: "100ms", Align: timestamppb.New(align)})
			_, err := recv()
			if got := violations(t, err); !slices.Equal(got, []string{"align"}) {
				t.Errorf("violations %q, want align", got)
			}
			cancel()
			if _, ok := e.streams.ended(2 * time.Second); !ok {
				t.Error("the server's handler still runs 2s after the client left")
			}
		})
	}

	for _, interval := range []string{"99ms", "0s", "soon", "-1s", "2h"} {
		t.Run("interval "+interval, func(t *testing.T) {
			_, recv := open(t, &irsv1.StreamStatsRequest{Interval: interval})
			_, err := recv()
			if got := violations(t, err); !slices.Equal(got, []string{"interval"}) {
				t.Errorf("violations %q, want interval", got)
			}
		})
	}
}
