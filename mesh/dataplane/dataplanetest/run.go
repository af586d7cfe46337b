// Package dataplanetest holds what the data planes' tests share: a run on a cluster as a plane sees it.
package dataplanetest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Run is a dataplane.ClusterRun whose Secret and Create record what they are given (the kubernetes backend's
// own are tested in workflows/kube, against a fake API server, and on a real node). Its fields are what its
// methods answer; a test changes them before the call it checks.
type Run struct {
	NS, IRSImage         string
	Pull                 corev1.PullPolicy
	PlatformSpec         *irsv1.Kubernetes
	MeshPolicy           *irsv1.Mesh
	StateDir             string
	CPName, CPIP         string
	CPPort               int32
	Authority            *ca.Control
	DataPort, CtrlPort   int32
	MeshedServices       []string
	NodeSelector         map[string]string
	Tolerations          []corev1.Toleration
	SecretErr, CreateErr error // what Secret and Create fail with (nil: they record)

	mu      sync.Mutex
	Secrets map[string]map[string]string // name → key → path, as Secret was given them
	Created []runtime.Object
}

var _ dataplane.ClusterRun = (*Run)(nil)

// NewRun is a run of namespace irs-run-1 under a mesh of meshType, with services api and web meshed, a control
// authority of its own and directories in t's temporary one.
func NewRun(t testing.TB, meshType string) *Run {
	t.Helper()
	authority, err := ca.NewControl(filepath.Join(t.TempDir(), "control"))
	if err != nil {
		t.Fatal(err)
	}
	return &Run{NS: "irs-run-1", IRSImage: "ghcr.io/irs-sim/irs:test", Pull: corev1.PullAlways,
		PlatformSpec: &irsv1.Kubernetes{}, MeshPolicy: &irsv1.Mesh{Type: meshType}, StateDir: t.TempDir(),
		CPName: "irs-control-plane", CPIP: "10.96.0.20", CPPort: 9443, Authority: authority, DataPort: 8080, CtrlPort: 8081,
		MeshedServices: []string{"api", "web"}, NodeSelector: map[string]string{"pool": "workers"},
		Tolerations: []corev1.Toleration{{Key: "dedicated", Value: "irs", Effect: corev1.TaintEffectNoSchedule}},
		Secrets:     map[string]map[string]string{}}
}

func (r *Run) Namespace() string                  { return r.NS }
func (r *Run) Image() string                      { return r.IRSImage }
func (r *Run) PullPolicy() corev1.PullPolicy      { return r.Pull }
func (r *Run) Platform() *irsv1.Kubernetes        { return r.PlatformSpec }
func (r *Run) Policy() *irsv1.Mesh                { return r.MeshPolicy }
func (r *Run) Dir() string                        { return r.StateDir }
func (r *Run) ControlPlaneName() string           { return r.CPName }
func (r *Run) ControlPlaneIP() string             { return r.CPIP }
func (r *Run) ControlPlanePort() int32            { return r.CPPort }
func (r *Run) ControlAuthority() *ca.Control      { return r.Authority }
func (r *Run) WorkerPorts() (data, control int32) { return r.DataPort, r.CtrlPort }
func (r *Run) Meshed() []string                   { return r.MeshedServices }

func (r *Run) WorkerNodes() (map[string]string, []corev1.Toleration) {
	return r.NodeSelector, r.Tolerations
}

func (r *Run) Labels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": name, "irs.dev/run": "run-1"}
}

func (r *Run) Secret(_ context.Context, name string, files map[string]string) error {
	if r.SecretErr != nil {
		return r.SecretErr
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Secrets[name] = files
	return nil
}

func (r *Run) Create(_ context.Context, obj runtime.Object) error {
	if r.CreateErr != nil {
		return r.CreateErr
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Created = append(r.Created, obj)
	return nil
}
