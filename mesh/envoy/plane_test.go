package envoy

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"github.com/irs-sim/irs/mesh/dataplane/dataplanetest"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
)

// newRun is the run the plane's tests give it (dataplanetest.Run), its sidecars with 3 threads.
func newRun(t *testing.T) *dataplanetest.Run {
	run := dataplanetest.NewRun(t, Type)
	run.MeshPolicy.Concurrency = 3
	return run
}

// TestPlaneFacets: Envoy is IRS's own, on a cluster and on this machine, with explicit listeners.
func TestPlaneFacets(t *testing.T) {
	p := &Plane{}
	if p.Type() != "envoy" {
		t.Errorf("Type = %q, want envoy", p.Type())
	}
	if got, want := p.Capture(), (dataplane.Capture{Explicit: true, InboundPort: 15006, OutboundBase: 15100}); got != want {
		t.Errorf("Capture = %+v, want %+v", got, want)
	}
	if p.Control() == nil || p.Cluster() == nil || p.Local() == nil || p.Installed() != nil {
		t.Errorf("facets Control %v, Cluster %v, Local %v, Installed %v; want all but Installed", p.Control(), p.Cluster(), p.Local(), p.Installed())
	}
	if flags := p.Control().Flags(); len(flags) != 0 {
		t.Errorf("Flags = %v, want none (xDS needs only the shared options)", flags)
	}
}

func envOf(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestClusterPod: a meshed pod's sidecar, whose inbound listener the Service targets only when the service is
// called, and the worker waits for it.
func TestClusterPod(t *testing.T) {
	for _, c := range []struct {
		name          string
		plane         *Plane
		platformImage string
		serves        bool
		wantImage     string
		wantPort      int32
	}{
		{name: "serves", plane: &Plane{}, serves: true, wantImage: DefaultImage, wantPort: 15006},
		{name: "load generator only", plane: &Plane{}, serves: false, wantImage: DefaultImage, wantPort: 0},
		{name: "the workflow's image", plane: &Plane{}, platformImage: "envoyproxy/envoy:v1.40.0", serves: true,
			wantImage: "envoyproxy/envoy:v1.40.0", wantPort: 15006},
		{name: "the flag's image first", plane: &Plane{Image: "registry.local/envoy:dev"}, platformImage: "envoyproxy/envoy:v1.40.0",
			serves: true, wantImage: "registry.local/envoy:dev", wantPort: 15006},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := newRun(t)
			run.PlatformSpec.EnvoyImage = c.platformImage
			parts := c.plane.Cluster().Pod(run, "api", c.serves)
			sc := parts.Sidecar
			if sc == nil || sc.Name != "envoy" {
				t.Fatalf("Sidecar = %v, want a container named envoy", sc)
			}
			if sc.Image != c.wantImage || sc.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("sidecar image %q (%s), want %q (the run's pull policy)", sc.Image, sc.ImagePullPolicy, c.wantImage)
			}
			if diff := cmp.Diff([]string{"--ready-requires", "http://127.0.0.1:15000/ready"}, parts.WorkerArgs); diff != "" {
				t.Errorf("WorkerArgs (-want +got):\n%s", diff)
			}
			if parts.ServicePort != c.wantPort {
				t.Errorf("ServicePort = %d, want %d", parts.ServicePort, c.wantPort)
			}
			var ports, wantPorts []int32
			for _, p := range sc.Ports {
				ports = append(ports, p.ContainerPort)
			}
			if c.serves {
				wantPorts = []int32{15006}
			}
			if !slices.Equal(ports, wantPorts) {
				t.Errorf("sidecar ports %v, want %v (the inbound listener only when it serves)", ports, wantPorts)
			}
			args := strings.Join(sc.Args, " ")
			for _, want := range []string{"-c /etc/irs/envoy/bootstrap.json", "--concurrency 3", "--service-node $(POD_NAME)",
				"--service-cluster api"} {
				if !strings.Contains(args, want) {
					t.Errorf("sidecar args %q lack %q", args, want)
				}
			}
			if v, ok := envOf(sc, "POD_NAME"); !ok || v != "" {
				t.Errorf("POD_NAME = %q (set: %v), want it from the pod's name", v, ok)
			}
			if len(parts.InitContainers) != 0 {
				t.Errorf("init containers %v, want none (the capture is explicit)", parts.InitContainers)
			}
			vols := map[string]corev1.VolumeSource{}
			for _, v := range parts.Volumes {
				vols[v.Name] = v.VolumeSource
			}
			for _, m := range sc.VolumeMounts {
				if _, ok := vols[m.Name]; !ok {
					t.Errorf("sidecar mounts %s, which the pod does not have", m.Name)
				}
			}
			if s := vols["sidecar-credentials"].Secret; s == nil || s.SecretName != "irs-sidecar-api" {
				t.Errorf("sidecar credentials %v, want the Secret irs-sidecar-api", vols["sidecar-credentials"])
			}
			if m := vols["envoy-bootstrap"].ConfigMap; m == nil || m.Name != "irs-envoy-bootstrap" {
				t.Errorf("bootstrap %v, want the ConfigMap irs-envoy-bootstrap", vols["envoy-bootstrap"])
			}
		})
	}
}

// TestClusterPrepare: a Secret per meshed service with its sidecar certificate of the run's control authority,
// and one bootstrap for every sidecar, which reaches the control plane's Service.
func TestClusterPrepare(t *testing.T) {
	run := newRun(t)
	if err := (&Plane{}).Cluster().Prepare(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	if len(run.Secrets) != 2 {
		t.Errorf("Secrets %v, want one per meshed service", slices.Sorted(maps.Keys(run.Secrets)))
	}
	for _, svc := range run.MeshedServices {
		files := run.Secrets["irs-sidecar-"+svc]
		if diff := cmp.Diff([]string{"ca.crt", "sidecar.crt", "sidecar.key"}, slices.Sorted(maps.Keys(files))); diff != "" {
			t.Errorf("Secret irs-sidecar-%s keys (-want +got):\n%s", svc, diff)
			continue
		}
		if files["ca.crt"] != run.Authority.CAFile() {
			t.Errorf("%s's ca.crt = %s, want the control authority's", svc, files["ca.crt"])
		}
		if id, ok := ca.IdentityOf(readCert(t, files["sidecar.crt"])); !ok || id.Service != svc || id.Runner {
			t.Errorf("%s's certificate says %+v (ok %v), want a sidecar of %s", svc, id, ok, svc)
		}
		if _, err := ca.ClientTLS(files["ca.crt"], ca.Files{Cert: files["sidecar.crt"], Key: files["sidecar.key"]}); err != nil {
			t.Errorf("%s's credentials do not load: %v", svc, err)
		}
	}
	if len(run.Created) != 1 {
		t.Fatalf("created %v, want the bootstrap ConfigMap only", run.Created)
	}
	cm, ok := run.Created[0].(*corev1.ConfigMap)
	if !ok || cm.Name != "irs-envoy-bootstrap" || cm.Namespace != run.NS ||
		cm.Labels["app.kubernetes.io/name"] != "irs-envoy-bootstrap" || cm.Labels["irs.dev/run"] != "run-1" {
		t.Fatalf("created %#v, want the ConfigMap irs-envoy-bootstrap in %s with the run's labels", run.Created[0], run.NS)
	}
	var boot map[string]any
	if err := json.Unmarshal([]byte(cm.Data["bootstrap.json"]), &boot); err != nil {
		t.Fatalf("bootstrap.json: %v", err)
	}
	compact, _ := json.Marshal(boot)
	for _, want := range []string{`"address":"10.96.0.20"`, `"portValue":9443`, `"filename":"/etc/irs/sidecar/sidecar.crt"`,
		`"filename":"/etc/irs/sidecar/ca.crt"`, `"portValue":15000`} {
		if !strings.Contains(string(compact), want) {
			t.Errorf("bootstrap lacks %s:\n%s", want, compact)
		}
	}
}

// TestClusterPrepareFails: a Secret or the ConfigMap that cannot be made is Prepare's error.
func TestClusterPrepareFails(t *testing.T) {
	boom := errors.New("forbidden")
	for _, c := range []struct {
		name               string
		secretErr, makeErr error
		wantPrefix         string
	}{
		{name: "Secret", secretErr: boom},
		{name: "ConfigMap", makeErr: boom, wantPrefix: "sidecar bootstrap: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := newRun(t)
			run.SecretErr, run.CreateErr = c.secretErr, c.makeErr
			err := (&Plane{}).Cluster().Prepare(t.Context(), run)
			if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), c.wantPrefix) {
				t.Errorf("Prepare = %v, want %q%v", err, c.wantPrefix, boom)
			}
		})
	}
}

// TestClusterControlPlaneAndNodes: Envoy adds nothing to the control plane's pod (xDS is on the runner's port)
// and has no per-node proxies.
func TestClusterControlPlaneAndNodes(t *testing.T) {
	run := newRun(t)
	cl := (&Plane{}).Cluster()
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "control-plane", Args: []string{"mesh", "control-plane"}}}}
	before := spec.DeepCopy()
	if ports := cl.ControlPlanePod(run, spec); ports != nil {
		t.Errorf("ControlPlanePod = %v, want no ports", ports)
	}
	if diff := cmp.Diff(before, spec); diff != "" {
		t.Errorf("ControlPlanePod changed the pod (-before +after):\n%s", diff)
	}
	if err := cl.Nodes(t.Context(), run); err != nil || len(run.Created) != 0 {
		t.Errorf("Nodes = %v, created %v; want nothing", err, run.Created)
	}
	if got := cl.NodeProxies(); got != "" {
		t.Errorf("NodeProxies = %q, want none", got)
	}
	if diff := cmp.Diff([]string{"envoy"}, cl.ProxyContainers()); diff != "" {
		t.Errorf("ProxyContainers (-want +got):\n%s", diff)
	}
	for _, pc := range [][2]string{{"irs-control-plane-0", "control-plane"}, {"api-0", "envoy"}, {"irs-ztunnel-x", "ztunnel"}} {
		if got := cl.Classify(pc[0], pc[1]); got != dataplane.NotMeasured {
			t.Errorf("Classify(%s, %s) = %v, want NotMeasured", pc[0], pc[1], got)
		}
	}
}

// TestClusterMeshState: a meshed pod is a node whose worker is on the pod's loopback and whose upstreams are
// its outbound listeners; an unmeshed pod is none; a service is its endpoints.
func TestClusterMeshState(t *testing.T) {
	run := newRun(t)
	cl := (&Plane{}).Cluster()
	ups := []*irsv1.MeshUpstream{{Service: "db", Port: 15101, Protocol: "http1"}}
	for _, c := range []struct {
		name string
		w    dataplane.Workload
		want *irsv1.MeshNode
	}{
		{name: "meshed, serves", w: dataplane.Workload{Pod: "api-0", Service: "api", IP: "10.1.0.4", Node: "n1", Meshed: true, Serves: true,
			Upstreams: func() []*irsv1.MeshUpstream { return ups }},
			want: &irsv1.MeshNode{Id: "api-0", Service: "api", Ip: "10.1.0.4", OutboundIp: "127.0.0.1", AppAddress: "127.0.0.1:8080",
				InboundPort: 15006, Upstreams: ups}},
		{name: "meshed, load only", w: dataplane.Workload{Pod: "gen-0", Service: "gen", IP: "10.1.0.5", Meshed: true,
			Upstreams: func() []*irsv1.MeshUpstream { return ups }},
			want: &irsv1.MeshNode{Id: "gen-0", Service: "gen", Ip: "10.1.0.5", OutboundIp: "127.0.0.1", AppAddress: "127.0.0.1:8080",
				Upstreams: ups}},
		{name: "not meshed", w: dataplane.Workload{Pod: "db-0", Service: "db", IP: "10.1.0.6", Serves: true}, want: nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, cl.Node(run, c.w), protocmp.Transform()); diff != "" {
				t.Errorf("Node (-want +got):\n%s", diff)
			}
		})
	}
	got := cl.Service(run, dataplane.ServiceView{Name: "api", ClusterIP: "10.96.1.1", Port: 80, Meshed: true, Endpoints: []string{"10.1.0.4:15006"}})
	want := &irsv1.MeshService{Name: "api", Endpoints: []string{"10.1.0.4:15006"}, Sidecars: true}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("Service (-want +got):\n%s", diff)
	}
}

func TestClusterDescribe(t *testing.T) {
	run := newRun(t)
	run.PlatformSpec.EnvoyImage = "envoyproxy/envoy:v1.40.0"
	got := (&Plane{}).Cluster().Describe(run)
	want := dataplane.Description{DataPlane: "envoy (image envoyproxy/envoy:v1.40.0)", ControlPlane: "IRS", EnvoyVersion: "envoyproxy/envoy:v1.40.0"}
	if got != want {
		t.Errorf("Describe = %+v, want %+v", got, want)
	}
}

// localProxy is a replica's proxy whose files go in a temporary directory.
func localProxy(t *testing.T) dataplane.LocalProxy {
	dir := t.TempDir()
	return dataplane.LocalProxy{ID: "api-1", Service: "api", Dir: dir, Admin: filepath.Join(dir, "api-1.sock"),
		ControlHost: "127.0.0.1", ControlPort: 40123, CA: "/run/c/ca.crt", Cert: "/run/c/sidecar-api.crt", Key: "/run/c/sidecar-api.key",
		Concurrency: 2}
}

// TestLocalCommand: a replica's Envoy reads a bootstrap written beside the worker's files and logs where Logs
// says; without Prepare there is no Envoy to run.
func TestLocalCommand(t *testing.T) {
	px := localProxy(t)
	if got, want := (&Plane{}).Local().Logs(px), filepath.Join(px.Dir, "api-1.envoy.log"); got != want {
		t.Errorf("Logs = %s, want %s", got, want)
	}
	t.Run("not prepared", func(t *testing.T) {
		cmd, err := (&Plane{}).Local().Command(px)
		if err == nil || !strings.Contains(err.Error(), "api-1") || !strings.Contains(err.Error(), "not located") {
			t.Errorf("Command = %v, %v; want an error: Envoy not located", cmd, err)
		}
		if _, err := os.Stat(filepath.Join(px.Dir, "api-1.envoy.json")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a bootstrap was written without an Envoy to read it: %v", err)
		}
	})
	t.Run("missing Envoy", func(t *testing.T) {
		_, err := (&Plane{Binary: filepath.Join(t.TempDir(), "envoy")}).Local().Prepare(t.Context())
		if !errors.Is(err, dataplane.ErrMissing) {
			t.Errorf("Prepare with no Envoy at --envoy-path = %v, want a dataplane.ErrMissing", err)
		}
	})
	t.Run("prepared", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := Locate(ctx, ""); err != nil {
			t.Skipf("no Envoy on this machine: %v", err)
		}
		p := &Plane{}
		desc, err := p.Local().Prepare(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if desc.EnvoyVersion == "" || desc.DataPlane != "envoy "+desc.EnvoyVersion || desc.ControlPlane != "IRS" {
			t.Errorf("Prepare's description = %+v, want envoy and its version, with IRS's control plane", desc)
		}
		cmd, err := p.Local().Command(px)
		if err != nil {
			t.Fatal(err)
		}
		boot := filepath.Join(px.Dir, "api-1.envoy.json")
		if cmd.Path != p.found.Path {
			t.Errorf("command runs %s, want the located Envoy %s", cmd.Path, p.found.Path)
		}
		if diff := cmp.Diff(Args(boot, filepath.Join(px.Dir, "api-1.envoy.log"), 2), cmd.Args[1:]); diff != "" {
			t.Errorf("command's flags (-want +got):\n%s", diff)
		}
		b, err := os.ReadFile(boot)
		if err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("bootstrap is not JSON: %v", err)
		}
		compact, _ := json.Marshal(doc)
		for _, want := range []string{`"id":"api-1"`, `"cluster":"api"`, `"path":"` + px.Admin + `"`, `"portValue":40123`,
			`"filename":"/run/c/sidecar-api.key"`} {
			if !strings.Contains(string(compact), want) {
				t.Errorf("bootstrap lacks %s:\n%s", want, compact)
			}
		}
	})
}

// TestLocalReady: a replica's Envoy is ready when its admin socket answers /ready with LIVE; not while nobody
// serves it, or while Envoy is still starting.
func TestLocalReady(t *testing.T) {
	l := (&Plane{}).Local()
	for _, c := range []struct {
		name   string
		status int
		body   string // "": nobody serves the socket
		stale  bool   // the socket is left by an Envoy that exited
		want   bool
	}{
		{name: "no socket", want: false},
		{name: "nobody serves", stale: true, want: false},
		{name: "live", status: http.StatusOK, body: "LIVE\n", want: true},
		{name: "starting", status: http.StatusServiceUnavailable, body: "PRE_INITIALIZING\n", want: false},
		{name: "draining", status: http.StatusOK, body: "DRAINING\n", want: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			px := localProxy(t)
			var asked []string
			var mu sync.Mutex
			if c.stale {
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: px.Admin, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				ln.SetUnlinkOnClose(false)
				ln.Close()
				if _, err := os.Stat(px.Admin); err != nil {
					t.Fatalf("the stale socket: %v", err)
				}
			}
			if c.body != "" {
				ln, err := net.Listen("unix", px.Admin)
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					asked = append(asked, r.Method+" "+r.URL.Path)
					mu.Unlock()
					w.WriteHeader(c.status)
					_, _ = w.Write([]byte(c.body))
				})}
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ln) }()
				t.Cleanup(func() {
					srv.Close()
					if err := <-served; !errors.Is(err, http.ErrServerClosed) {
						t.Errorf("admin server: %v", err)
					}
				})
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if got := l.Ready(ctx, px); got != c.want {
				t.Errorf("Ready = %v, want %v", got, c.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if c.body != "" && !slices.Equal(asked, []string{"GET /ready"}) {
				t.Errorf("admin asked %v, want GET /ready once", asked)
			}
		})
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
