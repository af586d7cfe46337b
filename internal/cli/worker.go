package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/control"
	"github.com/irs-sim/irs/worker/control/rest"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"google.golang.org/protobuf/encoding/protojson"
)

// workerOptions are the flags of `irs worker` that are not part of the worker document.
type workerOptions struct {
	config         string
	controlListen  string
	statsInterval  time.Duration
	readyFile      string
	exitWhenDone   bool
	checkUpstreams bool
	checkTimeout   time.Duration
}

func (a *app) newWorkerCmd() *cobra.Command {
	var opts workerOptions
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker: serve, call upstream services and/or generate load",
		Long: `Run a worker: one node of a simulated service graph. It serves HTTP/1.1, h2c and gRPC on --listen
with the configured delay, statuses, size and CPU cost, calls upstream services (--call) on every request, and
generates load (--target, --rate) — any combination of these.

Configuration comes from, in order of precedence: flags, IRS_* environment variables (IRS_DELAY for --delay),
the --config YAML file (an irs.v1.WorkerConfig document), and defaults.

Examples:
  irs worker --name server --listen 127.0.0.1:8081 --delay 50ms --status 503:5%
  irs worker --name client --listen 127.0.0.1:8080 --delay 20ms --call server=127.0.0.1:8081
  irs worker --name loadgen --target client=127.0.0.1:8080 --rate 100 --duration 30s --exit-when-done`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := newViper(cmd.Flags())
			spec, src, err := compileWorker(v, cmd.Flags(), a.env.LookupEnv)
			if err != nil {
				return err
			}
			opts.resolve(v)
			if opts.checkUpstreams {
				if err := worker.CheckEndpoints(cmd.Context(), spec, opts.checkTimeout); err != nil {
					return withExitCode(src.describeUnreachable(err), ExitInvalidConfig)
				}
			}
			return a.runWorker(cmd.Context(), spec, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.config, "config", "", "worker configuration `file` (YAML irs.v1.WorkerConfig)")
	f.StringVar(&opts.controlListen, "control-listen", "127.0.0.1:0", "control API `address` (stats, info, health)")
	f.DurationVar(&opts.statsInterval, "stats-interval", 0, "log a stats line every `interval` (0: never)")
	f.StringVar(&opts.readyFile, "ready-file", "", "write the listen addresses as JSON to `file` once serving")
	f.BoolVar(&opts.exitWhenDone, "exit-when-done", false, "exit when the load ends, printing the stats as JSON")
	f.BoolVar(&opts.checkUpstreams, "check-upstreams", true, "at start, fail (exit 2) if an endpoint cannot be reached")
	f.DurationVar(&opts.checkTimeout, "check-timeout", 5*time.Second, "how long --check-upstreams keeps trying")
	for _, o := range workerOverrides {
		if o.flag == "call" {
			f.StringArray(o.flag, nil, o.usage)
			continue
		}
		f.String(o.flag, "", o.usage)
	}
	return cmd
}

// resolve applies IRS_* environment variables to the options not set by flag.
func (o *workerOptions) resolve(v *viper.Viper) {
	o.controlListen = v.GetString("control-listen")
	o.statsInterval = v.GetDuration("stats-interval")
	o.readyFile = v.GetString("ready-file")
	o.exitWhenDone = v.GetBool("exit-when-done")
	o.checkUpstreams = v.GetBool("check-upstreams")
	o.checkTimeout = v.GetDuration("check-timeout")
}

// readyInfo is what --ready-file contains.
type readyInfo struct {
	Name    string `json:"name"`
	PID     int    `json:"pid"`
	Data    string `json:"data,omitempty"`
	Control string `json:"control"`
	Seed    uint64 `json:"seed"`
}

func (a *app) runWorker(ctx context.Context, spec *worker.Spec, opts workerOptions) error {
	ctrlLn, err := net.Listen("tcp", opts.controlListen)
	if err != nil {
		return withExitCode(fmt.Errorf("control listener: %w", err), ExitInvalidConfig)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := worker.New(spec, a.logger)
	if err := w.Start(ctx, spec); err != nil {
		ctrlLn.Close()
		return withExitCode(err, ExitInvalidConfig)
	}
	svc := control.New(w, ctrlLn.Addr().String())
	gin.SetMode(gin.ReleaseMode)
	ctrl := &http.Server{Handler: rest.Handler(svc), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ctrl.Serve(ctrlLn) }()
	a.logger.Info("worker ready", "name", spec.Name, "data", w.DataAddr(), "control", ctrlLn.Addr().String(), "seed", w.Seed())

	if opts.readyFile != "" {
		info := readyInfo{Name: spec.Name, PID: os.Getpid(), Data: w.DataAddr(), Control: ctrlLn.Addr().String(), Seed: w.Seed()}
		if err := writeFileAtomic(opts.readyFile, info); err != nil {
			cancel()
			w.Wait()
			return fmt.Errorf("ready file: %w", err)
		}
	}
	if opts.statsInterval > 0 {
		go logStats(ctx, a.logger, w, opts.statsInterval)
	}
	if opts.exitWhenDone {
		if done := w.LoadDone(); done != nil {
			go func() {
				select {
				case <-done:
					cancel()
				case <-ctx.Done():
				}
			}()
		}
	}
	w.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	_ = ctrl.Shutdown(sctx)
	if opts.exitWhenDone {
		b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true}.Marshal(w.Stats(false))
		if err != nil {
			return err
		}
		fmt.Fprintln(a.env.Stdout, string(b))
	}
	return nil
}

func writeFileAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// describeUnreachable formats endpoint check failures like configuration errors.
func (s *configSource) describeUnreachable(err error) error {
	if len(field.Flatten(err)) == 0 {
		return errors.New("unreachable endpoints")
	}
	return s.describe(err)
}
