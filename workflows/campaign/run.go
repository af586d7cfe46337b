package campaign

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/irs-sim/irs/internal/rundir"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/formats"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/proto"
)

// once runs the workflow under one mesh at one point of its sweep, in dir, writing the result to resultPath.
// variant names the run for its baseline (a comparison's variant of that name).
func (c *Campaign) once(ctx context.Context, p *plan, mesh *irsv1.Mesh, point workflows.SweepPoint, variant, dir, resultPath string) (*irsv1.WorkflowResult, error) {
	wf := workflows.ApplySweep(p.wf, point)
	wf.Mesh = mesh
	tl := p.tl
	if len(point) > 0 {
		// The timeline holds the loads the run starts with: the swept ones.
		var err error
		if tl, err = workflows.NewTimeline(wf, p.tl.Scale); err != nil {
			return nil, err
		}
	}
	// A comparison's run has its own directory inside the campaign's: made as the campaign's was.
	if err := rundir.Own(dir); err != nil {
		return nil, fmt.Errorf("--run-dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(resultPath), 0o755); err != nil {
		return nil, fmt.Errorf("result directory: %w", err)
	}
	s, err := p.backends.New(ctx, wf, mesh, dir)
	if err != nil {
		return nil, err
	}
	if !c.track(s.Backend) {
		_ = s.Backend.Stop(context.Background(), true)
		return nil, engine.ErrInterrupted
	}
	defer c.untrack()
	c.announce(p, wf, s.Environment, resultPath)
	progress := c.Stdout
	if p.opts.Progress == "off" {
		progress = nil
	}
	o := engine.Options{
		Workflow: wf, Timeline: tl, Backend: s.Backend, ResultPath: resultPath, Environment: s.Environment,
		Progress: progress, Interactive: p.interactive, Logger: c.Logger, Notes: s.Notes, Parameters: point.Map(),
	}
	if p.base != nil {
		o.Baseline = baseline.ForAssertions(p.base.file, variant)
	}
	if c.Checkpoint != nil {
		o.Checkpoint = func(snap engine.Snapshot) { c.Checkpoint(resultPath, snap) }
	}
	res, err := engine.Run(ctx, o)
	if p.interactive {
		fmt.Fprintln(c.Stdout)
	}
	return res, err
}

// announce says what runs, where, and where its result goes.
func (c *Campaign) announce(p *plan, wf *irsv1.Workflow, env *irsv1.Environment, resultPath string) {
	where := ""
	if env.GetNamespace() != "" {
		where = fmt.Sprintf(" in namespace %s (Kubernetes %s)", env.GetNamespace(), env.GetKubernetesVersion())
	}
	planes := ""
	if env.GetDataPlane() != "" {
		planes = fmt.Sprintf("; data plane: %s, control plane: %s", env.GetDataPlane(), env.GetControlPlane())
	}
	fmt.Fprintf(c.Stderr, "running %s (mesh %s%s)%s: %d services, %v (time scale %g, seed %d); result: %s\n",
		wf.GetName(), env.GetMesh(), planes, where, len(wf.GetServices()), p.tl.Total, p.tl.Scale, wf.GetSeed(), resultPath)
}

// single runs the workflow once and reports it. Compared with a baseline, the result is written again with
// the comparison.
func (c *Campaign) single(ctx context.Context, p *plan, mesh *irsv1.Mesh, point workflows.SweepPoint) Outcome {
	path := p.opts.Result
	if path == "" {
		path = filepath.Join(p.opts.RunDir, "result.json")
	}
	name := policy.Describe(mesh)
	if point.Label() != "" {
		name += " " + point.Label()
	}
	res, err := c.once(ctx, p, mesh, point, name, p.opts.RunDir, path)
	if res == nil {
		return Outcome{Workflow: p.name(), Err: err}
	}
	f := &resultfile.File{Path: path, Result: res}
	written := !errors.Is(err, engine.ErrResultNotWritten)
	if p.base != nil && res.GetTotal() != nil {
		c.compareWithBaseline(p.base, f)
		if werr := resultfile.WriteResult(path, res); werr != nil {
			err, written = errors.Join(err, fmt.Errorf("%w: %s: %w", engine.ErrResultNotWritten, path, werr)), false
		}
	}
	o := Outcome{Workflow: p.name(), Result: res, File: f}
	shown := path
	if !written {
		o.File, shown = nil, "" // not claimed: it is not there, or is an earlier snapshot
	}
	report.Summary(c.Stdout, res, shown)
	if !written {
		o.OutputErr = fmt.Errorf("the verdict above is in no file: %w", err)
		if !errors.Is(err, engine.ErrInterrupted) {
			err = nil // the run itself ended; what failed is the write, which OutputErr says
		}
	}
	o.Err = err
	reported := f
	if !written {
		// The reports say what the exit code says: the run's verdict stands, but its result is in no file, which
		// is an error (junit.xml said passed while the command exited 1).
		failed := proto.Clone(res).(*irsv1.WorkflowResult)
		failed.Status, failed.Error = engine.StatusError, o.OutputErr.Error()
		reported = &resultfile.File{Path: path, Result: failed}
	}
	o.OutputErr = errors.Join(o.OutputErr, c.writeReports(ctx, p.reports, filepath.Dir(path), reported))
	return o
}

// writeReports writes the reports asked for beside a result, comparison or suite, and says where they are; the
// error names those that could not be written.
func (c *Campaign) writeReports(ctx context.Context, reports []string, dir string, f *resultfile.File) error {
	written, err := formats.WriteReports(ctx, dir, f, reports)
	if len(written) > 0 {
		fmt.Fprintf(c.Stdout, "reports: %s\n", strings.Join(written, ", "))
	}
	return err
}
