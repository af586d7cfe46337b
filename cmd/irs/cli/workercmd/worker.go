// Package workercmd is the worker's command: `irs worker`, and the whole of irs-worker, the same command in a
// binary that links only the worker. A worker that also linked the engine, the mesh control plane and the
// Kubernetes backend paid for their package initialisation in every process (3.4 MB of allocations before
// main; an idle `irs worker` held 7 MB anonymous, irs-worker 4 MB) and mapped more of a larger binary.
package workercmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/irs-sim/irs/cmd/irs/cli/exitcode"
	"github.com/irs-sim/irs/internal/atomicfile"
	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/control"
	"github.com/irs-sim/irs/worker/control/grpcapi"
	"github.com/irs-sim/irs/worker/control/rest"
	"github.com/irs-sim/irs/worker/telemetry"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
)

// workerOptions are the flags of `irs worker` that are not part of the worker document.
type workerOptions struct {
	config           string
	controlListen    string
	controlOpen      bool // an open control API beyond loopback, asked for
	controlToken     string
	controlTokenFile string
	readyRequires    string
	statsInterval    time.Duration
	readyFile        string
	exitWhenDone     bool
	checkUpstreams   bool
	checkTimeout     time.Duration
	instance         string
	tags             []string
	prometheus       bool
	otlpEndpoint     string
	otlpInsecure     bool
	otlpInterval     time.Duration
	dogstatsd        string
	dogstatsdEvery   time.Duration
	traceSample      float64
}

// Env is the process state the command may touch.
type Env struct {
	Stdout, Stderr io.Writer
	LookupEnv      func(string) (string, bool)
}

// command runs `irs worker`.
type command struct {
	env Env
	// logger is the process's logger, built by the root command from its flags before the command runs.
	logger func() *slog.Logger
}

// New returns the worker command; logger returns the logger the root command built.
func New(env Env, logger func() *slog.Logger) *cobra.Command {
	a := &command{env: env, logger: logger}
	return a.newWorkerCmd()
}

func (a *command) newWorkerCmd() *cobra.Command {
	var opts workerOptions
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker: serve, call upstream services and/or generate load",
		Long: `Run a worker: one node of a simulated service graph. It serves HTTP/1.1, h2c and gRPC on --listen
with the configured delay, statuses, size and CPU cost, calls upstream services (--call) on every request, and
generates load (--target, --rate) — any combination of these. Its control API (REST and gRPC on
--control-listen) reads and changes the configuration live, starts and stops load, and reports stats.

Configuration comes from, in order of precedence: flags, IRS_* environment variables (IRS_DELAY for --delay),
the --config YAML file (an irs.v1.WorkerConfig document), and defaults.

Examples:
  irs worker --name server --listen 127.0.0.1:8081 --delay 50ms --status 503:5%
  irs worker --name client --listen 127.0.0.1:8080 --delay 20ms --call server=127.0.0.1:8081
  irs worker --name loadgen --target client=127.0.0.1:8080 --rate 100 --duration 30s --exit-when-done`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.startWorker(cmd.Context(), cmd.Flags(), &opts) },
	}
	opts.register(cmd.Flags())
	return cmd
}

// register registers the flags of `irs worker`: the options' own, and the worker document's overrides.
func (o *workerOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.config, "config", "", "worker configuration `file` (YAML irs.v1.WorkerConfig)")
	f.StringVar(&o.controlListen, "control-listen", "127.0.0.1:0", "control API `address` (REST and gRPC)")
	f.StringVar(&o.controlToken, "control-token", "", "require this bearer `token` on every control call")
	f.StringVar(&o.controlTokenFile, "control-token-file", "", "read the control token from `file`")
	f.BoolVar(&o.controlOpen, "control-open", false, "serve the control API without a token on an address beyond loopback: anyone who reaches it can reconfigure the worker")
	f.DurationVar(&o.statsInterval, "stats-interval", 0, "log a stats line every `interval` (0: never)")
	f.StringVar(&o.readyFile, "ready-file", "", "write the listen addresses as JSON to `file` once serving")
	f.BoolVar(&o.exitWhenDone, "exit-when-done", false, "exit when the load ends, printing the stats as JSON")
	f.BoolVar(&o.checkUpstreams, "check-upstreams", true, "at start, fail (exit 2) if an endpoint cannot be reached")
	f.DurationVar(&o.checkTimeout, "check-timeout", 5*time.Second, "how long --check-upstreams keeps trying")
	f.Bool("seed-per-instance", false, "mix the --instance name into the seed (replicas that share a configuration)")
	f.StringVar(&o.readyRequires, "ready-requires", "", "/readyz is ready only when this `URL` answers 200 too (the sidecar the worker is reached through)")
	f.StringVar(&o.instance, "instance", "", "this worker's instance id in telemetry (default host:pid)")
	f.StringArrayVar(&o.tags, "tag", nil, "telemetry tag `key=value` for the worker's lifetime (repeatable)")
	f.BoolVar(&o.prometheus, "prometheus", true, "serve metrics at /metrics on the control port")
	f.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "send metrics (and traces) to this OTLP/gRPC `host:port`")
	f.BoolVar(&o.otlpInsecure, "otlp-insecure", false, "send OTLP without TLS")
	f.DurationVar(&o.otlpInterval, "otlp-interval", 10*time.Second, "how often metrics are sent over OTLP")
	f.StringVar(&o.dogstatsd, "dogstatsd", "", "send metrics to a DogStatsD agent at `host:port` (UDP)")
	f.DurationVar(&o.dogstatsdEvery, "dogstatsd-interval", 10*time.Second, "how often metrics go to DogStatsD")
	f.Float64Var(&o.traceSample, "trace-sample", 0, "fraction of new traces sampled, 0-1 (0: tracing off; needs --otlp-endpoint)")
	for _, ov := range workerOverrides {
		if ov.flag == "call" {
			f.StringArray(ov.flag, nil, ov.usage)
			continue
		}
		f.String(ov.flag, "", ov.usage)
	}
}

// startWorker compiles the worker's configuration from its flags, environment and file, checks its upstreams
// and runs it.
func (a *command) startWorker(ctx context.Context, flags *pflag.FlagSet, opts *workerOptions) error {
	v := newViper(flags)
	spec, src, err := compileWorker(ctx, v, flags, a.env.LookupEnv)
	if err != nil {
		return err
	}
	if err := opts.resolve(ctx, v, flags, a.env.LookupEnv); err != nil {
		return exitcode.With(err, exitcode.InvalidConfig)
	}
	if v.GetBool("seed-per-instance") && spec.Seed != 0 {
		// Replicas started from one configuration (a Deployment's pods) each draw their own sequence,
		// reproducibly for a given instance name.
		spec.Seed = instanceSeed(spec.Seed, opts.instance)
	}
	if opts.checkUpstreams {
		if err := worker.CheckEndpoints(ctx, spec, opts.checkTimeout); err != nil {
			return exitcode.With(src.describeUnreachable(err), exitcode.InvalidConfig)
		}
	}
	return a.runWorker(ctx, spec, *opts)
}

// resolveToken sets the control token from --control-token or --control-token-file (or their IRS_* variables).
// Either given empty is refused, not taken for "no token": a worker started with --control-token "" from a
// script whose variable was unset would otherwise serve its control API to anyone.
func (o *workerOptions) resolveToken(ctx context.Context, flags *pflag.FlagSet, lookupEnv func(string) (string, bool)) error {
	tokenFrom, tokenGiven := givenAs(flags, lookupEnv, "control-token")
	fileFrom, fileGiven := givenAs(flags, lookupEnv, "control-token-file")
	switch {
	case tokenGiven && fileGiven:
		return fmt.Errorf("%s and %s: give one", tokenFrom, fileFrom)
	case fileGiven:
		if strings.TrimSpace(o.controlTokenFile) == "" {
			return fmt.Errorf("%s is empty: name the token file, or leave it out for a control API without a token", fileFrom)
		}
		tok, err := token.Read(ctx, o.controlTokenFile)
		if err != nil {
			return fmt.Errorf("%s: %w", fileFrom, err)
		}
		o.controlToken = tok
	case tokenGiven:
		if strings.TrimSpace(o.controlToken) != o.controlToken && strings.TrimSpace(o.controlToken) != "" {
			// A token with spaces around it would be a token nobody can send (headers are trimmed).
			return fmt.Errorf("%s: has leading or trailing whitespace", tokenFrom)
		}
		if _, err := token.Check(o.controlToken, tokenFrom); err != nil {
			return err
		}
	}
	return nil
}

// checkOpenControl refuses a control API without a token on an address other machines may reach, unless
// --control-open says so: `--control-listen 0.0.0.0:P` alone started one on every interface without a word.
func checkOpenControl(listen, tok string, open bool) error {
	if tok != "" || open {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil // the listener says what is wrong with the address
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--control-listen %s without a token would serve the control API to anyone who reaches it: "+
		"give --control-token or --control-token-file, or --control-open to mean it", listen)
}

// givenAs tells whether a flag was given on the command line or as its IRS_* variable (set, even empty), and
// names where it came from.
func givenAs(flags *pflag.FlagSet, lookupEnv func(string) (string, bool), name string) (string, bool) {
	if f := flags.Lookup(name); f != nil && f.Changed {
		return "--" + name, true
	}
	if _, ok := lookupEnv(envName(name)); ok {
		return envName(name), true
	}
	return "", false
}

// resolve applies IRS_* environment variables to the options not set by flag, and checks them.
func (o *workerOptions) resolve(ctx context.Context, v *viper.Viper, flags *pflag.FlagSet, lookupEnv func(string) (string, bool)) error {
	o.controlListen = v.GetString("control-listen")
	o.controlToken = v.GetString("control-token")
	o.controlTokenFile = v.GetString("control-token-file")
	o.statsInterval = v.GetDuration("stats-interval")
	o.readyFile = v.GetString("ready-file")
	o.exitWhenDone = v.GetBool("exit-when-done")
	o.checkUpstreams = v.GetBool("check-upstreams")
	o.checkTimeout = v.GetDuration("check-timeout")
	o.instance = v.GetString("instance")
	o.tags = listValue(v, "tag")
	o.prometheus = v.GetBool("prometheus")
	o.otlpEndpoint = v.GetString("otlp-endpoint")
	o.otlpInsecure = v.GetBool("otlp-insecure")
	o.otlpInterval = v.GetDuration("otlp-interval")
	o.dogstatsd = v.GetString("dogstatsd")
	o.dogstatsdEvery = v.GetDuration("dogstatsd-interval")
	o.traceSample = v.GetFloat64("trace-sample")
	o.controlOpen = v.GetBool("control-open")
	if err := o.resolveToken(ctx, flags, lookupEnv); err != nil {
		return err
	}
	if err := checkOpenControl(o.controlListen, o.controlToken, o.controlOpen); err != nil {
		return err
	}
	if o.traceSample < 0 || o.traceSample > 1 {
		return fmt.Errorf("--trace-sample %v: want a fraction between 0 and 1", o.traceSample)
	}
	if o.traceSample > 0 && o.otlpEndpoint == "" {
		return errors.New("--trace-sample: tracing sends spans over OTLP: set --otlp-endpoint")
	}
	for _, t := range o.tags {
		if k, _, ok := strings.Cut(t, "="); !ok || k == "" {
			return fmt.Errorf("--tag %q: want key=value", t)
		}
	}
	if o.instance == "" {
		host, _ := os.Hostname()
		o.instance = host + ":" + strconv.Itoa(os.Getpid())
	}
	return nil
}

// runWorker runs the worker as this process (worker.Run), its control API wired to the worker's control
// packages.
func (a *command) runWorker(ctx context.Context, spec *worker.Spec, opts workerOptions) error {
	// OpenTelemetry reports its own errors (an export that failed) through a global handler: our log.
	logger := a.logger()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("telemetry export", "err", err) }))
	err := worker.Run(ctx, spec, logger, opts.run(a.env.Stdout))
	if errors.As(err, new(*worker.StartError)) {
		return exitcode.With(err, exitcode.InvalidConfig)
	}
	return err
}

// run returns how worker.Run runs the worker.
func (o workerOptions) run(stdout io.Writer) worker.RunOptions {
	return worker.RunOptions{
		ControlListen: o.controlListen, Control: ControlHandler(o.controlToken), ReadyRequires: o.readyRequires,
		Telemetry: o.telemetry(), ReadyFile: o.readyFile, StatsInterval: o.statsInterval,
		ExitWhenDone: o.exitWhenDone, Stdout: stdout,
	}
}

// ControlHandler serves the REST and gRPC control APIs on one port: gRPC requests to the gRPC server,
// everything else to the REST router.
func ControlHandler(token string) func(worker.ControlSetup) http.Handler {
	return func(c worker.ControlSetup) http.Handler {
		svc := control.New(c.Worker, c.Addr, token)
		gs := grpc.NewServer(grpcapi.ServerOptions(svc)...)
		grpcapi.Register(gs, svc)
		gin.SetMode(gin.ReleaseMode)
		restAPI := rest.Handler(svc, rest.Options{Metrics: c.Metrics, ReadyToo: c.ReadyToo})
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				gs.ServeHTTP(rw, r)
				return
			}
			restAPI.ServeHTTP(rw, r)
		})
	}
}

// telemetry returns the exporters' configuration of the flags (worker.Run adds the worker's identity).
func (o workerOptions) telemetry() telemetry.Config {
	tags := map[string]string{}
	for _, t := range o.tags {
		k, v, _ := strings.Cut(t, "=")
		tags[k] = v
	}
	return telemetry.Config{
		Instance: o.instance, Tags: tags,
		Prometheus:   o.prometheus,
		OTLPEndpoint: o.otlpEndpoint, OTLPInsecure: o.otlpInsecure, OTLPInterval: o.otlpInterval,
		DogStatsD: o.dogstatsd, DogStatsDInterval: o.dogstatsdEvery,
		TraceSample: o.traceSample,
	}
}

// writeJSONFile writes v as JSON to path, whole or not at all (a runner polls ready files).
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// describeUnreachable formats endpoint check failures like configuration errors.
func (s *configSource) describeUnreachable(err error) error {
	if len(field.Flatten(err)) == 0 {
		return errors.New("unreachable endpoints")
	}
	return s.describe(err)
}

// instanceSeed mixes an instance name into a seed (FNV-1a, then splitmix64's finaliser).
func instanceSeed(seed uint64, instance string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(instance); i++ {
		h = (h ^ uint64(instance[i])) * 1099511628211
	}
	x := seed ^ h
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
