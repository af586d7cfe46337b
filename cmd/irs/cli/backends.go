package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/campaign"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/local"
	"github.com/irs-sim/irs/workflows/report"
)

// runner makes the backends of one workflow's runs (campaign.Backends): worker processes on this machine
// (workflows/local) or pods on the cluster of --backend kubernetes (workflows/kube). It is where the
// command line names the data planes a run reports.
type runner struct {
	app    *app
	tl     *workflows.Timeline // the workflow's, unswept
	kube   kubeOptions         // resolved for the workflow
	planes *dataplane.Registry
	local  map[string]dataplane.Description // the local data planes Prepare readied, by mesh type
}

var _ campaign.Backends = (*runner)(nil)

// Check refuses a mesh the backend cannot run, and node and network actions where there are no nodes.
func (r *runner) Check(variants []*irsv1.Mesh) error {
	if r.kube.backend != backendKubernetes {
		for _, st := range r.tl.Steps {
			switch {
			case st.Mesh != nil && st.Mesh.GetComponent() == workflows.ComponentNodeProxy:
				return withExitCode(fmt.Errorf("%s: a local run has no node proxy (its mesh is sidecars and their control "+
					"plane; node proxies run on a cluster's nodes: --backend kubernetes)", st.Path), ExitInvalidConfig)
			case st.Mesh != nil:
				if !slices.ContainsFunc(variants, func(v *irsv1.Mesh) bool { return v.GetType() != policy.TypeNone && v.GetType() != "" }) {
					return withExitCode(fmt.Errorf("%s: a mesh action needs a mesh to hit (--mesh envoy)", st.Path), ExitInvalidConfig)
				}
			case st.Network():
				return withExitCode(fmt.Errorf("%s: %s actions need --backend kubernetes (this machine has no nodes to lose "+
					"and no network between them)", st.Path, st.Kind()), ExitInvalidConfig)
			}
		}
	}
	for _, v := range variants {
		if err := meshForBackend(r.planes, v, r.kube.backend); err != nil {
			return withExitCode(err, ExitInvalidConfig)
		}
	}
	return nil
}

// KnowsNodes reports whether the replicas' nodes are known: on a cluster; locally every replica runs on this
// machine.
func (r *runner) KnowsNodes() bool { return r.kube.backend == backendKubernetes }

// Plan says, for a dry run on a cluster, that the cluster restarts and discovers replicas, within what time.
func (r *runner) Plan(wf *irsv1.Workflow) report.PlanOptions {
	var plan report.PlanOptions
	if r.kube.backend == backendKubernetes {
		plan.Kubernetes, plan.ReadyTimeout = true, kubeReadyTimeout(wf, r.tl)
	}
	return plan
}

// Prepare readies the data plane of every variant of a local run (finds its proxy's binary), and describes
// this machine for a comparison.
func (r *runner) Prepare(ctx context.Context, variants []*irsv1.Mesh) (*irsv1.Environment, error) {
	env := campaign.Environment("local")
	if r.kube.backend != backendLocal {
		return env, nil
	}
	r.local = map[string]dataplane.Description{}
	for _, v := range variants {
		t := v.GetType()
		p := r.planes.Own(t)
		if _, done := r.local[t]; done || p == nil || p.Local() == nil {
			continue
		}
		// Before anything starts: a mesh without its proxy is an environment to fix, not a run that fails.
		d, err := p.Local().Prepare(ctx)
		if errors.Is(err, dataplane.ErrMissing) {
			return nil, withExitCode(err, ExitInvalidEnvironment)
		} else if err != nil {
			return nil, err
		}
		r.local[t] = d
		env.EnvoyVersion = cmp.Or(env.EnvoyVersion, d.EnvoyVersion)
	}
	return env, nil
}

// New makes the backend of one run, and the environment its result reports: where it runs and its data and
// control planes.
func (r *runner) New(ctx context.Context, wf *irsv1.Workflow, mesh *irsv1.Mesh, dir string) (campaign.Setup, error) {
	env := campaign.Environment(r.kube.backend)
	env.Mesh = policy.Describe(mesh)
	d, prepared := r.local[mesh.GetType()]
	if prepared {
		env.EnvoyVersion, env.DataPlane, env.ControlPlane = d.EnvoyVersion, d.DataPlane, d.ControlPlane
	}
	var backend workflows.Backend
	var notes []string
	if r.kube.backend == backendKubernetes {
		kb, err := r.kubeBackend(wf, mesh, env)
		if err != nil {
			return campaign.Setup{}, kubeError(err)
		}
		version, err := kb.(*kube.Backend).Check(ctx)
		if err != nil {
			return campaign.Setup{}, kubeError(err)
		}
		env.KubernetesVersion = version
		env.Nodes = int32(kb.(*kube.Backend).Nodes(ctx))
		env.LoadgenNodes, env.LoadgenServices = kb.(*kube.Backend).Loadgen()
		d := kb.(*kube.Backend).Describe()
		env.DataPlane, env.ControlPlane, env.EnvoyVersion = d.DataPlane, d.ControlPlane, cmp.Or(d.EnvoyVersion, env.EnvoyVersion)
		backend, notes = kb, kubeNotes(wf)
		for _, n := range notes {
			fmt.Fprintln(r.app.env.Stderr, "note:", n)
		}
	} else {
		lb, err := local.New(local.Config{
			Executable: r.app.env.Executable, Dir: filepath.Join(dir, "workers"),
			RestartDelay: r.tl.RestartDelay, DiscoveryDelay: r.tl.DiscoveryDelay, ReadyTimeout: r.tl.ReadyTimeout,
			WorkerArgs: []string{"--tag", "workflow=" + wf.GetName(), "--tag", "mesh=" + env.Mesh}, Logger: r.app.logger,
			Mesh: mesh, Plane: r.localPlane(mesh, prepared), ControlToken: token.New(),
		})
		if err != nil {
			return campaign.Setup{}, err
		}
		backend = lb
	}
	return campaign.Setup{Backend: backend, Environment: env, Notes: notes}, nil
}

// localPlane is the data plane a local run of mesh runs (nil: none), once Prepare readied it.
func (r *runner) localPlane(mesh *irsv1.Mesh, prepared bool) dataplane.Plane {
	if !prepared {
		return nil
	}
	return r.planes.Own(mesh.GetType())
}
