package ambient

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/irs-sim/irs/mesh/dataplane/dataplanetest"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// newRun is the run the plane's tests give it (dataplanetest.Run).
func newRun(t *testing.T) *dataplanetest.Run { return dataplanetest.NewRun(t, Type) }

func envValue(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// flagValue is the value after name in args ("" if absent).
func flagValue(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func TestPlaneFacets(t *testing.T) {
	p := &Plane{}
	if p.Type() != "ambient" || p.Capture() != (dataplane.Capture{}) {
		t.Errorf("Type %q, Capture %+v; want ambient, transparent", p.Type(), p.Capture())
	}
	if p.Control() == nil || p.Cluster() == nil || p.Local() != nil || p.Installed() != nil {
		t.Errorf("facets Control %v, Cluster %v, Local %v, Installed %v; want Control and Cluster only", p.Control(), p.Cluster(), p.Local(), p.Installed())
	}
}

// TestClusterPod: a meshed pod gets no sidecar, only ambient-init, which captures its traffic (letting the
// tunnel port and the worker's control API through) and enrols it over the node agent's socket of the run.
func TestClusterPod(t *testing.T) {
	run := newRun(t)
	for _, serves := range []bool{true, false} {
		parts := (&Plane{}).Cluster().Pod(run, "api", serves)
		if parts.Sidecar != nil || parts.ServicePort != 0 || len(parts.WorkerArgs) != 0 {
			t.Errorf("serves %v: Sidecar %v, ServicePort %d, WorkerArgs %v; want none (the proxy is the node's)", serves,
				parts.Sidecar, parts.ServicePort, parts.WorkerArgs)
		}
		if len(parts.InitContainers) != 1 || parts.InitContainers[0].Name != "ambient-init" {
			t.Fatalf("serves %v: init containers %v, want ambient-init", serves, parts.InitContainers)
		}
		init := parts.InitContainers[0]
		if init.Image != run.IRSImage || init.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("ambient-init image %q (%s), want IRS's %q with the run's pull policy", init.Image, init.ImagePullPolicy, run.IRSImage)
		}
		for flag, want := range map[string]string{
			"--enrol":              "/var/run/irs/ambient/irs-run-1/enrol.sock",
			"--skip-inbound-ports": "15008,8081",
			"--proxy-mark":         "0x539",
			"--inbound-port":       "15006",
			"--outbound-port":      "15001",
			"--service-account":    "api",
			"--pod-uid":            "$(POD_UID)",
		} {
			if got := flagValue(init.Args, flag); got != want {
				t.Errorf("ambient-init %s %q, want %q", flag, got, want)
			}
		}
		if len(parts.Volumes) != 1 || parts.Volumes[0].HostPath == nil || parts.Volumes[0].HostPath.Path != "/var/run/irs/ambient" ||
			len(init.VolumeMounts) != 1 || init.VolumeMounts[0].Name != parts.Volumes[0].Name ||
			init.VolumeMounts[0].MountPath != "/var/run/irs/ambient" {
			t.Errorf("volumes %v mounted %v, want the node's /var/run/irs/ambient at the same path", parts.Volumes, init.VolumeMounts)
		}
	}
}

// TestClusterPrepare: the run's CA and the node proxies' token, in the control plane's Secret and (token and
// root only) in the node proxies'; the control plane loads what Prepare wrote.
func TestClusterPrepare(t *testing.T) {
	run := newRun(t)
	if err := (&Plane{}).Cluster().Prepare(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"irs-control-plane-ambient", "irs-ztunnel"}, slices.Sorted(maps.Keys(run.Secrets))); diff != "" {
		t.Fatalf("Secrets (-want +got):\n%s", diff)
	}
	cp, zt := run.Secrets["irs-control-plane-ambient"], run.Secrets["irs-ztunnel"]
	if diff := cmp.Diff([]string{"ca.crt", "ca.key", "token"}, slices.Sorted(maps.Keys(cp))); diff != "" {
		t.Errorf("control plane Secret keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"token": cp["token"], "root-cert.pem": cp["ca.crt"]}, zt); diff != "" {
		t.Errorf("node proxies' Secret (-want +got), want the control plane's token and root, not its key:\n%s", diff)
	}
	for name, path := range cp {
		if !strings.HasPrefix(path, run.StateDir+string(filepath.Separator)) {
			t.Errorf("%s at %s is outside the run's private directory %s", name, path, run.StateDir)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", path, err)
		}
	}
	if _, err := LoadControlPlane(filepath.Dir(cp["ca.crt"]), run.NS, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("the control plane cannot load what Prepare wrote: %v", err)
	}
	if len(run.Created) != 0 {
		t.Errorf("created %v, want nothing before Nodes", run.Created)
	}

	failing := newRun(t)
	failing.SecretErr = errors.New("forbidden")
	if err := (&Plane{}).Cluster().Prepare(t.Context(), failing); !errors.Is(err, failing.SecretErr) {
		t.Errorf("Prepare with Secrets refused = %v, want the refusal", err)
	}
}

// TestClusterControlPlanePod: the control plane's pod serves ztunnel's xDS and CA on istiod's port, with the
// credentials Prepare made and the host name the node proxies check; every flag it is given is the plane's or
// shared.
func TestClusterControlPlanePod(t *testing.T) {
	run := newRun(t)
	p := &Plane{}
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "control-plane", Args: []string{"mesh", "control-plane", "--data-plane", "ambient"}}}}
	ports := p.Cluster().ControlPlanePod(run, spec)
	if diff := cmp.Diff([]corev1.ServicePort{{Name: "ambient", Port: 15012, TargetPort: intstr.FromInt32(15012)}}, ports); diff != "" {
		t.Errorf("ControlPlanePod's Service ports (-want +got):\n%s", diff)
	}
	ct := spec.Containers[0]
	for flag, want := range map[string]string{"--proxy-listen": "0.0.0.0:15012", "--ambient-credentials": "/etc/irs/ambient",
		"--ambient-host": "irs-control-plane.irs-run-1.svc", "--ambient-namespace": "irs-run-1"} {
		if got := flagValue(ct.Args, flag); got != want {
			t.Errorf("control plane %s %q, want %q", flag, got, want)
		}
	}
	known := map[string]bool{"--proxy-listen": true, "--data-plane": true}
	for _, f := range p.Flags() {
		known["--"+f.Name] = true
	}
	for _, a := range ct.Args {
		if strings.HasPrefix(a, "--") && !known[a] {
			t.Errorf("control plane given %s, which is not a flag of its", a)
		}
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "irs-control-plane-ambient" ||
		len(ct.VolumeMounts) != 1 || ct.VolumeMounts[0].Name != spec.Volumes[0].Name || ct.VolumeMounts[0].MountPath != "/etc/irs/ambient" {
		t.Errorf("volumes %v mounted %v, want the Secret irs-control-plane-ambient at /etc/irs/ambient", spec.Volumes, ct.VolumeMounts)
	}
}

// TestClusterNodes: the node proxies are a DaemonSet on the workers' nodes: ztunnel, reaching the control plane
// by its Service, beside the node agent, sharing the run's socket directory.
func TestClusterNodes(t *testing.T) {
	run := newRun(t)
	cl := (&Plane{}).Cluster()
	if err := cl.Nodes(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	if len(run.Created) != 1 {
		t.Fatalf("created %v, want the node proxies' DaemonSet", run.Created)
	}
	ds, ok := run.Created[0].(*appsv1.DaemonSet)
	if !ok || ds.Name != "irs-ztunnel" || ds.Namespace != run.NS {
		t.Fatalf("created %#v, want the DaemonSet irs-ztunnel in %s", run.Created[0], run.NS)
	}
	if cl.NodeProxies() != ds.Labels["app.kubernetes.io/name"] {
		t.Errorf("NodeProxies = %q, but the DaemonSet's pods are labelled %q", cl.NodeProxies(), ds.Labels["app.kubernetes.io/name"])
	}
	tmpl := ds.Spec.Template
	for k, v := range ds.Spec.Selector.MatchLabels {
		if tmpl.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not on the pods (labels %v): the DaemonSet would be refused", k, v, tmpl.Labels)
		}
	}
	if diff := cmp.Diff(run.NodeSelector, tmpl.Spec.NodeSelector); diff != "" {
		t.Errorf("NodeSelector (-want +got), want the workers':\n%s", diff)
	}
	if diff := cmp.Diff(run.Tolerations, tmpl.Spec.Tolerations); diff != "" {
		t.Errorf("Tolerations (-want +got), want the workers':\n%s", diff)
	}
	containers := map[string]corev1.Container{}
	for _, c := range tmpl.Spec.Containers {
		containers[c.Name] = c
	}
	zt, agent := containers["ztunnel"], containers["node-agent"]
	if zt.Image != DefaultZtunnelImage || agent.Image != run.IRSImage {
		t.Errorf("images ztunnel %q, node-agent %q; want %q and IRS's %q", zt.Image, agent.Image, DefaultZtunnelImage, run.IRSImage)
	}
	for name, want := range map[string]string{"XDS_ADDRESS": "https://10.96.0.20:15012", "CA_ADDRESS": "https://10.96.0.20:15012",
		"ALT_XDS_HOSTNAME": "irs-control-plane.irs-run-1.svc", "INPOD_UDS": "/var/run/irs/ambient/irs-run-1/ztunnel.sock",
		"AUTH_TOKEN": "/etc/irs/ztunnel/token", "CA_ROOT_CA": "/etc/irs/ztunnel/root-cert.pem"} {
		if got := envValue(&zt, name); got != want {
			t.Errorf("ztunnel %s = %q, want %q", name, got, want)
		}
	}
	if got := flagValue(agent.Args, "--dir"); got != "/var/run/irs/ambient/irs-run-1" {
		t.Errorf("node-agent --dir %q, want the run's socket directory", got)
	}
	vols := map[string]corev1.VolumeSource{}
	for _, v := range tmpl.Spec.Volumes {
		vols[v.Name] = v.VolumeSource
	}
	for _, m := range slices.Concat(zt.VolumeMounts, agent.VolumeMounts) {
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("a container mounts %s, which the pod does not have", m.Name)
		}
	}
	if s := vols["ztunnel-credentials"].Secret; s == nil || s.SecretName != "irs-ztunnel" {
		t.Errorf("ztunnel's credentials %v, want the Secret irs-ztunnel", vols["ztunnel-credentials"])
	}

	failing := newRun(t)
	failing.CreateErr = errors.New("forbidden")
	if err := cl.Nodes(t.Context(), failing); !errors.Is(err, failing.CreateErr) || !strings.HasPrefix(err.Error(), "node proxies: ") {
		t.Errorf("Nodes with the DaemonSet refused = %v, want node proxies: forbidden", err)
	}
}

// TestClusterClassify: in the node proxies' pods, ztunnel is the node proxy and the node agent is the control
// plane's (istio-cni's part); nothing else is the plane's.
func TestClusterClassify(t *testing.T) {
	cl := (&Plane{}).Cluster()
	for _, c := range []struct {
		pod, container string
		want           dataplane.Component
	}{
		{pod: "irs-ztunnel-7xk2p", container: "ztunnel", want: dataplane.NodeProxy},
		{pod: "irs-ztunnel-7xk2p", container: "node-agent", want: dataplane.ControlComponent},
		{pod: "api-6d9f-abcde", container: "ztunnel", want: dataplane.NotMeasured},
		{pod: "api-6d9f-abcde", container: "worker", want: dataplane.NotMeasured},
		{pod: "irs-ztunnelx", container: "ztunnel", want: dataplane.NotMeasured},
		{pod: "irs-control-plane-5c4-x", container: "control-plane", want: dataplane.NotMeasured},
	} {
		if got := cl.Classify(c.pod, c.container); got != c.want {
			t.Errorf("Classify(%s, %s) = %v, want %v", c.pod, c.container, got, c.want)
		}
	}
	if got := cl.ProxyContainers(); len(got) != 0 {
		t.Errorf("ProxyContainers = %v, want none (the pods have no sidecar)", got)
	}
}

// TestClusterMeshState: every workload is a node of the mesh state, meshed or not, with its node (ztunnel
// serves the pods of its node); a service is known by its names.
func TestClusterMeshState(t *testing.T) {
	run := newRun(t)
	cl := (&Plane{}).Cluster()
	for _, w := range []dataplane.Workload{
		{Pod: "api-0", Service: "api", IP: "10.1.0.4", Node: "node-a", Meshed: true, Serves: true},
		{Pod: "db-0", Service: "db", IP: "10.1.0.6", Node: "node-b"},
	} {
		want := &irsv1.MeshNode{Id: w.Pod, Service: w.Service, Ip: w.IP, Host: w.Node}
		if diff := cmp.Diff(want, cl.Node(run, w), protocmp.Transform()); diff != "" {
			t.Errorf("Node(%s) (-want +got):\n%s", w.Pod, diff)
		}
	}
	got := cl.Service(run, dataplane.ServiceView{Name: "api", ClusterIP: "10.96.1.1", Port: 80, Meshed: true, Endpoints: []string{"10.1.0.4:8080"}})
	want := &irsv1.MeshService{Name: "api", Endpoints: []string{"10.1.0.4:8080"}, Sidecars: true,
		Authorities: []string{"api.irs-run-1.svc.cluster.local:80", "10.96.1.1:80"}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("Service (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		plane *Plane
		want  string
	}{
		{plane: &Plane{}, want: "ztunnel 62d8265, a node proxy per node (image " + DefaultZtunnelImage + ")"},
		{plane: &Plane{Image: "registry.local/ztunnel:dev"}, want: "ztunnel 62d8265, a node proxy per node (image registry.local/ztunnel:dev)"},
	} {
		if got := c.plane.Cluster().Describe(run); got != (dataplane.Description{DataPlane: c.want, ControlPlane: "IRS"}) {
			t.Errorf("Describe = %+v, want %q with IRS's control plane", got, c.want)
		}
	}
}

// TestControlServe: the control-plane command's flags of the plane; missing or bad ones are OptionErrors naming
// them; with what Prepare made, the plane serves the runner's API and ztunnel's until stopped.
func TestControlServe(t *testing.T) {
	var flagNames []string
	for _, f := range (&Plane{}).Flags() {
		flagNames = append(flagNames, f.Name)
		if f.Value == nil || f.Usage == "" {
			t.Errorf("flag %s has no value or usage", f.Name)
		}
	}
	if diff := cmp.Diff([]string{"ambient-credentials", "ambient-host", "ambient-namespace"}, flagNames); diff != "" {
		t.Errorf("Flags (-want +got):\n%s", diff)
	}
	prepared := newRun(t)
	if err := (&Plane{}).Cluster().Prepare(t.Context(), prepared); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(prepared.StateDir, "ambient")
	all := map[string]string{"ambient-credentials": creds, "ambient-host": "irs-control-plane.irs-run-1.svc", "ambient-namespace": "irs-run-1"}
	without := func(name string) map[string]string {
		m := maps.Clone(all)
		delete(m, name)
		return m
	}
	with := func(name, value string) map[string]string {
		m := maps.Clone(all)
		m[name] = value
		return m
	}
	for _, c := range []struct {
		name        string
		flags       map[string]string
		proxyListen string
		wantErr     []string // nil: serves
	}{
		{name: "no flags", proxyListen: "127.0.0.1:0", wantErr: []string{"--ambient-credentials", "--ambient-host", "--ambient-namespace"}},
		{name: "no credentials", flags: without("ambient-credentials"), proxyListen: "127.0.0.1:0", wantErr: []string{"--ambient-credentials"}},
		{name: "no host", flags: without("ambient-host"), proxyListen: "127.0.0.1:0", wantErr: []string{"--ambient-host"}},
		{name: "no namespace", flags: without("ambient-namespace"), proxyListen: "127.0.0.1:0", wantErr: []string{"--ambient-namespace"}},
		{name: "empty credentials", flags: with("ambient-credentials", t.TempDir()), proxyListen: "127.0.0.1:0",
			wantErr: []string{"--ambient-credentials", "ca.crt"}},
		{name: "bad proxy listener", flags: all, proxyListen: "127.0.0.1:notaport", wantErr: []string{"--proxy-listen"}},
		{name: "host not a DNS name", flags: with("ambient-host", "bücher.example"), proxyListen: "127.0.0.1:0",
			wantErr: []string{"--ambient-host"}},
		{name: "prepared", flags: all, proxyListen: "127.0.0.1:0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Plane{}
			for _, f := range p.Flags() {
				*f.Value = c.flags[f.Name]
			}
			runner := grpc.NewServer()
			defer runner.Stop()
			served := make(chan error, 1)
			var logged bytes.Buffer // Serve logs the proxies' address before it returns
			stop, err := p.Serve(t.Context(), runner, dataplane.ControlEnv{Logger: slog.New(slog.NewJSONHandler(&logged, nil)),
				ProxyListen: c.proxyListen, Served: served})
			if c.wantErr != nil {
				for _, want := range c.wantErr {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("Serve = %v, want it to name %s", err, want)
					}
				}
				if !dataplane.IsInvalidOption(err) {
					t.Errorf("Serve's error %v is not an OptionError", err)
				}
				if _, ok := runner.GetServiceInfo()["irs.v1.MeshControlService"]; ok {
					t.Error("the runner's API was registered despite the error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Serve = %v", err)
			}
			if _, ok := runner.GetServiceInfo()["irs.v1.MeshControlService"]; !ok {
				t.Errorf("the runner's API is not registered: %v", slices.Collect(maps.Keys(runner.GetServiceInfo())))
			}
			var line struct{ Addr, Host string }
			if err := json.Unmarshal(logged.Bytes(), &line); err != nil || line.Host != all["ambient-host"] {
				t.Fatalf("Serve logged %q (%v), want the node proxies' address and the host name", logged.String(), err)
			}
			conn, err := net.DialTimeout("tcp", line.Addr, wait)
			if err != nil {
				t.Fatalf("ztunnel's APIs are not served at %s: %v", line.Addr, err)
			}
			conn.Close()
			stop()
			select {
			case err := <-served: // Stop may come before Serve started
				if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
					t.Errorf("the node proxies' server ended with %v, want its stop", err)
				}
			case <-time.After(wait):
				t.Fatalf("the node proxies' server did not end within %v of stop", wait)
			}
			if conn, err := net.DialTimeout("tcp", line.Addr, time.Second); err == nil {
				conn.Close()
				t.Errorf("ztunnel's APIs are still served at %s after stop", line.Addr)
			}
		})
	}
}
