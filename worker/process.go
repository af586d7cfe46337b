package worker

import (
	"context"
	"fmt"
	"github.com/irs-sim/irs/internal/readyfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/irs-sim/irs/internal/memtrim"
	"github.com/irs-sim/irs/worker/telemetry"
	"google.golang.org/protobuf/encoding/protojson"
)

// RunOptions say how a worker runs as a process (`irs worker`): everything around the Worker itself.
type RunOptions struct {
	// ControlListen is the address of the control API (REST and gRPC on one port, HTTP/1.1 and h2c).
	ControlListen string
	// Control makes the control API's handler. It is given, not built here: the control packages import this
	// one.
	Control func(ControlSetup) http.Handler
	// ReadyRequires, when set, is a URL that must answer 200 too for /readyz to say ready (the sidecar the
	// worker is reached through).
	ReadyRequires string
	// Telemetry says where the worker's telemetry goes; Run sets its Service, Role and LiveTags.
	Telemetry telemetry.Config
	// ReadyFile, when set, receives the worker's name, pid, addresses and seed as JSON once it serves (a runner
	// polls it: it is written whole or not at all).
	ReadyFile string
	// StatsInterval, when positive, logs a stats line per active series every interval.
	StatsInterval time.Duration
	// ExitWhenDone ends the run when the load ends, and prints the stats as JSON to Stdout.
	ExitWhenDone bool
	Stdout       io.Writer
}

// ControlSetup is what a control API is made of.
type ControlSetup struct {
	Worker *Worker
	// Addr is the address the control API is served on.
	Addr string
	// Metrics serves the telemetry's Prometheus metrics (nil: none).
	Metrics http.Handler
	// ReadyToo must also hold for /readyz to say ready (nil: nothing more).
	ReadyToo func(*http.Request) bool
}

// StartError is a worker that could not start: its control listener, its telemetry or its configuration (a
// listener, an upstream's client). It says what the configuration asks that cannot be had; the command line
// exits 2 for it.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Run runs a worker as a process until ctx is done (or, with ExitWhenDone, its load is): it opens the control
// listener, starts the telemetry and the worker, serves the control API, writes the ready file and logs stats;
// at the end it stops the worker gracefully, then the control API and the telemetry. What could not start is a
// *StartError. Every goroutine it starts has ended when it returns.
func Run(ctx context.Context, spec *Spec, logger *slog.Logger, o RunOptions) error {
	ln, err := net.Listen("tcp", o.ControlListen)
	if err != nil {
		return &StartError{Err: fmt.Errorf("control listener: %w", err)}
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := New(spec, logger)
	tel, err := telemetry.Start(ctx, o.telemetry(spec, w), w.Registry(), logger)
	if err != nil {
		return &StartError{Err: err}
	}
	defer shutdownTelemetry(tel, logger)
	w.SetTracer(tel.Tracer())
	if err := w.Start(ctx, spec); err != nil {
		return &StartError{Err: err}
	}
	p := &process{o: o, w: w, ln: ln, cancel: cancel}
	p.serveControl(tel)
	logger.Info("worker ready", "name", spec.Name, "data", w.DataAddr(), "control", ln.Addr().String(), "seed", w.Seed())
	releaseStartupPages(logger)
	if o.ReadyFile != "" {
		if err := p.writeReady(spec); err != nil {
			p.stop()
			return fmt.Errorf("ready file: %w", err)
		}
	}
	if o.StatsInterval > 0 {
		p.tasks.Go(func() { logStats(ctx, logger, w, o.StatsInterval) })
	}
	if done := w.LoadDone(); o.ExitWhenDone && done != nil {
		p.tasks.Go(func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		})
	}
	p.wait()
	if o.ExitWhenDone {
		return printStats(o.Stdout, w)
	}
	return nil
}

// process is a running worker's lifecycle: the goroutines Run owns.
type process struct {
	o      RunOptions
	w      *Worker
	ln     net.Listener
	cancel context.CancelFunc
	ctrl   *http.Server
	tasks  sync.WaitGroup // the control server, the stats log, the end-of-load watch
}

// serveControl serves the control API on the control listener: HTTP/1.1 and h2c on one port.
func (p *process) serveControl(tel *telemetry.Telemetry) {
	addr := p.ln.Addr().String()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	p.ctrl = &http.Server{
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: p.o.Control(ControlSetup{Worker: p.w, Addr: addr, Metrics: tel.Handler(),
			ReadyToo: readyProbe(p.o.ReadyRequires)}),
	}
	p.tasks.Go(func() { _ = p.ctrl.Serve(p.ln) })
}

// wait waits for the worker's end (its context), then stops the control API, giving its calls in flight 2 s.
func (p *process) wait() {
	p.w.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	_ = p.ctrl.Shutdown(sctx)
	p.tasks.Wait()
}

// stop ends the worker now, and waits.
func (p *process) stop() {
	p.cancel()
	p.wait()
}

// writeReady writes the ready file (irs.v1.ReadyFile), whole or not at all (a runner polls it).
func (p *process) writeReady(spec *Spec) error {
	return readyfile.Write(p.o.ReadyFile, &irsv1.ReadyFile{Name: spec.Name, Pid: int32(os.Getpid()),
		Data: p.w.DataAddr(), Control: p.ln.Addr().String(), Seed: p.w.Seed()})
}

// printStats prints everything the worker measured, as JSON.
func printStats(out io.Writer, w *Worker) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true}.Marshal(w.Stats())
	if err != nil {
		return err
	}
	fmt.Fprintln(out, string(b))
	return nil
}

// telemetry is the exporters' configuration for w: the options', with the worker's identity.
func (o RunOptions) telemetry(spec *Spec, w *Worker) telemetry.Config {
	cfg := o.Telemetry
	cfg.Service, cfg.Role = spec.Name, role(spec)
	cfg.LiveTags = func() map[string]string { s, _ := w.Config(); return s.Tags }
	return cfg
}

// shutdownTelemetry flushes and stops the exporters, giving them 5 s.
func shutdownTelemetry(tel *telemetry.Telemetry, logger *slog.Logger) {
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := tel.Shutdown(sctx); err != nil {
		logger.Warn("telemetry shutdown", "err", err)
	}
}

// releaseStartupPages drops the executable's pages only start-up touched from the resident set (memtrim).
func releaseStartupPages(logger *slog.Logger) {
	if n, err := memtrim.Executable(); err != nil {
		logger.Debug("release start-up pages", "err", err)
	} else {
		logger.Debug("released start-up pages", "mapped_bytes", n)
	}
}

// role names what a worker does: server, client (serves and calls), loadgen, or a combination.
func role(spec *Spec) string {
	var roles []string
	if spec.Listen != "" {
		if len(spec.Calls) > 0 {
			roles = append(roles, "client")
		} else {
			roles = append(roles, "server")
		}
	}
	if spec.Load != nil {
		roles = append(roles, "loadgen")
	}
	if len(roles) == 0 {
		return "idle"
	}
	return strings.Join(roles, "+")
}

// readyProbe returns a check that url answers 200 (nil for no url).
func readyProbe(url string) func(*http.Request) bool {
	if url == "" {
		return nil
	}
	client := &http.Client{Timeout: 500 * time.Millisecond}
	return func(r *http.Request) bool {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}
