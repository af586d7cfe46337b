// Package control is the worker's control surface, independent of transport: what the REST (rest) and gRPC
// (grpcapi) adapters expose is implemented here once.
package control

import (
	"os"
	"time"

	"github.com/irs-sim/irs/internal/buildinfo"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Service controls one worker.
type Service struct {
	w       *worker.Worker
	started time.Time
	// controlAddr is the control listener's address, for Info.
	controlAddr string
}

// New returns the control service of w.
func New(w *worker.Worker, controlAddr string) *Service {
	return &Service{w: w, started: time.Now(), controlAddr: controlAddr}
}

// Stats returns the worker's stats; reset starts a new window.
func (s *Service) Stats(reset bool) *irsv1.StatsSnapshot { return s.w.Stats(reset) }

// Info describes the worker.
func (s *Service) Info() *irsv1.WorkerInfo {
	return &irsv1.WorkerInfo{
		Name:        s.w.Name(),
		Version:     buildinfo.Version(),
		Pid:         int64(os.Getpid()),
		StartedAt:   timestamppb.New(s.started),
		UptimeMs:    time.Since(s.started).Milliseconds(),
		DataAddr:    s.w.DataAddr(),
		ControlAddr: s.controlAddr,
		Seed:        s.w.Seed(),
	}
}

// Ready reports whether the worker serves (or has nothing to serve).
func (s *Service) Ready() bool { return s.w.Ready() }
