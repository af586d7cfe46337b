package linkerd

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// newRun is the run the plane's tests give it (dataplanetest.Run).
func newRun(t *testing.T) *dataplanetest.Run { return dataplanetest.NewRun(t, Type) }

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
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
	if p.Type() != "linkerd" || p.Capture() != (dataplane.Capture{}) {
		t.Errorf("Type %q, Capture %+v; want linkerd, transparent", p.Type(), p.Capture())
	}
	if p.Control() == nil || p.Cluster() == nil || p.Local() != nil || p.Installed() != nil {
		t.Errorf("facets Control %v, Cluster %v, Local %v, Installed %v; want Control and Cluster only", p.Control(), p.Cluster(), p.Local(), p.Installed())
	}
	if a, b := p.Cluster(), p.Cluster(); a == b {
		t.Error("Cluster returned the same value twice: two runs would share their trust anchors")
	}
}

// TestClusterPod: a meshed pod's linkerd-proxy, given the run's trust anchors once Prepare made them, and the
// init container that captures the pod's traffic but lets the worker's control API through.
func TestClusterPod(t *testing.T) {
	run := newRun(t)
	cl := (&Plane{}).Cluster()
	before := cl.Pod(run, "api", true)
	if v, _ := envValue(before.Sidecar, "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS"); v != "" {
		t.Errorf("trust anchors before Prepare = %q, want none yet", v)
	}
	if err := cl.Prepare(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	for _, serves := range []bool{true, false} {
		t.Run(fmt.Sprintf("serves %v", serves), func(t *testing.T) {
			parts := cl.Pod(run, "api", serves)
			px := parts.Sidecar
			if px == nil || px.Name != "linkerd-proxy" || px.Image != DefaultProxyImage || px.ImagePullPolicy != corev1.PullAlways {
				t.Fatalf("Sidecar = %+v, want linkerd-proxy of %s, the run's pull policy", px, DefaultProxyImage)
			}
			anchors, _ := envValue(px, "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS")
			root := readPEM(t, run.Secrets["irs-control-plane-linkerd"]["ca.crt"])
			if anchors == "" || anchors != root {
				t.Errorf("trust anchors %q, want the run's CA (the control plane's ca.crt) %q", anchors, root)
			}
			if block, _ := pem.Decode([]byte(anchors)); block == nil {
				t.Errorf("trust anchors are not PEM: %q", anchors)
			} else if cert, err := x509.ParseCertificate(block.Bytes); err != nil || !cert.IsCA {
				t.Errorf("trust anchors are not a CA certificate: %v", err)
			}
			for name, want := range map[string]string{
				"LINKERD2_PROXY_IDENTITY_LOCAL_NAME":    "api.irs-run-1.serviceaccount.identity.linkerd.cluster.local",
				"LINKERD2_PROXY_IDENTITY_SVC_NAME":      "irs-control-plane.irs-run-1.serviceaccount.identity.linkerd.cluster.local",
				"LINKERD2_PROXY_DESTINATION_SVC_ADDR":   "10.96.0.20:8086",
				"LINKERD2_PROXY_INBOUND_PORTS":          "8080",
				"LINKERD2_PROXY_IDENTITY_TOKEN_FILE":    "/var/run/linkerd/identity/end-entity/token",
				"LINKERD2_PROXY_OUTBOUND_LISTEN_ADDR":   "127.0.0.1:4140",
				"LINKERD2_PROXY_INBOUND_DEFAULT_POLICY": "all-unauthenticated",
			} {
				if got, _ := envValue(px, name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if len(parts.InitContainers) != 1 || parts.InitContainers[0].Name != "linkerd-init" {
				t.Fatalf("init containers %v, want linkerd-init", parts.InitContainers)
			}
			init := parts.InitContainers[0]
			if init.Image != run.IRSImage {
				t.Errorf("linkerd-init image %q, want IRS's %q", init.Image, run.IRSImage)
			}
			if got := flagValue(init.Args, "--skip-inbound-ports"); got != "4190,4191,8081" {
				t.Errorf("--skip-inbound-ports %q, want the proxy's control and admin ports and the worker's control port 8081", got)
			}
			for flag, want := range map[string]string{"--proxy-uid": "2102", "--inbound-port": "4143", "--outbound-port": "4140",
				"--identity":   "api.irs-run-1.serviceaccount.identity.linkerd.cluster.local",
				"--token-from": "/var/run/irs/linkerd-token/token"} {
				if got := flagValue(init.Args, flag); got != want {
					t.Errorf("linkerd-init %s %q, want %q", flag, got, want)
				}
			}
			vols := map[string]corev1.VolumeSource{}
			for _, v := range parts.Volumes {
				vols[v.Name] = v.VolumeSource
			}
			for _, m := range slices.Concat(px.VolumeMounts, init.VolumeMounts) {
				if _, ok := vols[m.Name]; !ok {
					t.Errorf("a container mounts %s, which the pod does not have", m.Name)
				}
			}
			if s := vols["linkerd-token"].Secret; s == nil || s.SecretName != "irs-linkerd-api" {
				t.Errorf("token volume %v, want the Secret irs-linkerd-api", vols["linkerd-token"])
			}
			if diff := cmp.Diff([]string{"--ready-requires", "http://127.0.0.1:4191/ready"}, parts.WorkerArgs); diff != "" {
				t.Errorf("WorkerArgs (-want +got):\n%s", diff)
			}
			if parts.ServicePort != 0 {
				t.Errorf("ServicePort = %d, want 0 (transparent: the Service targets the worker)", parts.ServicePort)
			}
		})
	}
}

// TestClusterPrepare: a token per meshed service, in its own Secret for its pods and, beside the run's CA, in
// the control plane's; the files are the runner's only.
func TestClusterPrepare(t *testing.T) {
	run := newRun(t)
	if err := (&Plane{}).Cluster().Prepare(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	wantSecrets := []string{"irs-control-plane-linkerd", "irs-linkerd-api", "irs-linkerd-web"}
	if diff := cmp.Diff(wantSecrets, slices.Sorted(maps.Keys(run.Secrets))); diff != "" {
		t.Fatalf("Secrets (-want +got):\n%s", diff)
	}
	cp := run.Secrets["irs-control-plane-linkerd"]
	wantKeys := []string{"api.irs-run-1.serviceaccount.identity.linkerd.cluster.local.token", "ca.crt", "ca.key",
		"web.irs-run-1.serviceaccount.identity.linkerd.cluster.local.token"}
	if diff := cmp.Diff(wantKeys, slices.Sorted(maps.Keys(cp))); diff != "" {
		t.Errorf("control plane Secret keys (-want +got):\n%s", diff)
	}
	for _, svc := range run.MeshedServices {
		files := run.Secrets["irs-linkerd-"+svc]
		if len(files) != 1 || files["token"] == "" {
			t.Errorf("Secret irs-linkerd-%s = %v, want its token only", svc, files)
			continue
		}
		tok := readPEM(t, files["token"])
		if tok == "" || tok != readPEM(t, cp[svc+".irs-run-1.serviceaccount.identity.linkerd.cluster.local.token"]) {
			t.Errorf("%s's token %q is not the one the control plane checks", svc, tok)
		}
	}
	if api, web := readPEM(t, run.Secrets["irs-linkerd-api"]["token"]), readPEM(t, run.Secrets["irs-linkerd-web"]["token"]); api == web {
		t.Error("two services share a token: either could be the other")
	}
	for _, files := range run.Secrets {
		for _, path := range files {
			if !strings.HasPrefix(path, run.StateDir+string(filepath.Separator)) {
				t.Errorf("%s is outside the run's private directory %s", path, run.StateDir)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, mode %v; want 0600", path, err, fi.Mode().Perm())
			}
		}
	}
	if _, err := LoadControlPlane(filepath.Dir(cp["ca.crt"])); err != nil {
		t.Errorf("the control plane cannot load what Prepare wrote: %v", err)
	}
	if len(run.Created) != 0 {
		t.Errorf("created %v, want nothing", run.Created)
	}

	failing := newRun(t)
	failing.SecretErr = errors.New("forbidden")
	if err := (&Plane{}).Cluster().Prepare(t.Context(), failing); !errors.Is(err, failing.SecretErr) {
		t.Errorf("Prepare with Secrets refused = %v, want the refusal", err)
	}
}

// TestClusterControlPlanePod: the control plane's pod serves the proxies' APIs on their port, with the
// credentials Prepare made and the identity the proxies check; every flag it is given is the plane's or shared.
func TestClusterControlPlanePod(t *testing.T) {
	run := newRun(t)
	p := &Plane{}
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "control-plane", Args: []string{"mesh", "control-plane", "--data-plane", "linkerd"}}}}
	ports := p.Cluster().ControlPlanePod(run, spec)
	want := []corev1.ServicePort{{Name: "linkerd", Port: 8086, TargetPort: intstr.FromInt32(8086)}}
	if diff := cmp.Diff(want, ports); diff != "" {
		t.Errorf("ControlPlanePod's Service ports (-want +got):\n%s", diff)
	}
	ct := spec.Containers[0]
	for flag, want := range map[string]string{"--proxy-listen": "0.0.0.0:8086", "--linkerd-credentials": "/etc/irs/linkerd",
		"--linkerd-name": "irs-control-plane.irs-run-1.serviceaccount.identity.linkerd.cluster.local"} {
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
	if len(ct.Ports) != 1 || ct.Ports[0].ContainerPort != 8086 {
		t.Errorf("container ports %v, want 8086", ct.Ports)
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "irs-control-plane-linkerd" ||
		len(ct.VolumeMounts) != 1 || ct.VolumeMounts[0].Name != spec.Volumes[0].Name || ct.VolumeMounts[0].MountPath != "/etc/irs/linkerd" {
		t.Errorf("volumes %v mounted %v, want the Secret irs-control-plane-linkerd at /etc/irs/linkerd", spec.Volumes, ct.VolumeMounts)
	}
}

// TestClusterRest: no per-node proxies; the proxies are linkerd-proxy; Destination knows services by their names
// and, meshed, their proxies' identity; no node of the mesh state.
func TestClusterRest(t *testing.T) {
	run := newRun(t)
	cl := (&Plane{}).Cluster()
	if err := cl.Nodes(t.Context(), run); err != nil || len(run.Created) != 0 {
		t.Errorf("Nodes = %v, created %v; want nothing", err, run.Created)
	}
	if cl.NodeProxies() != "" {
		t.Errorf("NodeProxies = %q, want none", cl.NodeProxies())
	}
	if diff := cmp.Diff([]string{"linkerd-proxy"}, cl.ProxyContainers()); diff != "" {
		t.Errorf("ProxyContainers (-want +got):\n%s", diff)
	}
	if got := cl.Classify("api-0", "linkerd-proxy"); got != dataplane.NotMeasured {
		t.Errorf("Classify = %v, want NotMeasured", got)
	}
	if n := cl.Node(run, dataplane.Workload{Pod: "api-0", Service: "api", Meshed: true, Serves: true}); n != nil {
		t.Errorf("Node = %v, want none", n)
	}
	for _, c := range []struct {
		name string
		s    dataplane.ServiceView
		want *irsv1.MeshService
	}{
		{name: "meshed", s: dataplane.ServiceView{Name: "api", ClusterIP: "10.96.1.1", Port: 80, Meshed: true, Endpoints: []string{"10.1.0.4:8080"}},
			want: &irsv1.MeshService{Name: "api", Endpoints: []string{"10.1.0.4:8080"}, Sidecars: true,
				Authorities: []string{"api.irs-run-1.svc.cluster.local:80", "10.96.1.1:80"},
				Identity:    "api.irs-run-1.serviceaccount.identity.linkerd.cluster.local"}},
		{name: "not meshed", s: dataplane.ServiceView{Name: "db", ClusterIP: "10.96.1.2", Port: 5432, Endpoints: []string{"10.1.0.5:8080"}},
			want: &irsv1.MeshService{Name: "db", Endpoints: []string{"10.1.0.5:8080"},
				Authorities: []string{"db.irs-run-1.svc.cluster.local:5432", "10.96.1.2:5432"}}},
	} {
		if diff := cmp.Diff(c.want, cl.Service(run, c.s), protocmp.Transform()); diff != "" {
			t.Errorf("%s: Service (-want +got):\n%s", c.name, diff)
		}
	}
	for _, c := range []struct {
		plane *Plane
		want  string
	}{
		{plane: &Plane{}, want: "linkerd2-proxy 29637b6 (image " + DefaultProxyImage + ")"},
		{plane: &Plane{Image: "registry.local/proxy:dev"}, want: "linkerd2-proxy 29637b6 (image registry.local/proxy:dev)"},
	} {
		if got := c.plane.Cluster().Describe(run); got != (dataplane.Description{DataPlane: c.want, ControlPlane: "IRS"}) {
			t.Errorf("Describe = %+v, want %q with IRS's control plane", got, c.want)
		}
	}
}

// TestControlServe: the control-plane command's flags of the plane; missing or bad ones are OptionErrors naming
// them; with what Prepare made, the plane serves the runner's API and its proxies' until stopped.
func TestControlServe(t *testing.T) {
	var names []string
	for _, f := range (&Plane{}).Flags() {
		names = append(names, f.Name)
		if f.Value == nil || f.Usage == "" {
			t.Errorf("flag %s has no value or usage", f.Name)
		}
	}
	if diff := cmp.Diff([]string{"linkerd-credentials", "linkerd-name"}, names); diff != "" {
		t.Errorf("Flags (-want +got):\n%s", diff)
	}
	prepared := newRun(t)
	if err := (&Plane{}).Cluster().Prepare(t.Context(), prepared); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(prepared.StateDir, "linkerd")
	name := "irs-control-plane.irs-run-1.serviceaccount.identity.linkerd.cluster.local"
	for _, c := range []struct {
		name         string
		flags        map[string]string
		proxyListen  string
		wantErr      []string // nil: serves
		wantOptError bool
	}{
		{name: "no flags", flags: nil, proxyListen: "127.0.0.1:0",
			wantErr: []string{"--linkerd-credentials", "--linkerd-name"}, wantOptError: true},
		{name: "no name", flags: map[string]string{"linkerd-credentials": creds}, proxyListen: "127.0.0.1:0",
			wantErr: []string{"--linkerd-name"}, wantOptError: true},
		{name: "no credentials", flags: map[string]string{"linkerd-name": name}, proxyListen: "127.0.0.1:0",
			wantErr: []string{"--linkerd-credentials"}, wantOptError: true},
		{name: "empty credentials", flags: map[string]string{"linkerd-credentials": t.TempDir(), "linkerd-name": name},
			proxyListen: "127.0.0.1:0", wantErr: []string{"--linkerd-credentials", "ca.crt"}, wantOptError: true},
		{name: "bad proxy listener", flags: map[string]string{"linkerd-credentials": creds, "linkerd-name": name},
			proxyListen: "127.0.0.1:notaport", wantErr: []string{"--proxy-listen"}, wantOptError: true},
		{name: "name not a DNS name", flags: map[string]string{"linkerd-credentials": creds, "linkerd-name": "bücher.example"},
			proxyListen: "127.0.0.1:0", wantErr: []string{"--linkerd-name"}, wantOptError: true},
		{name: "prepared", flags: map[string]string{"linkerd-credentials": creds, "linkerd-name": name}, proxyListen: "127.0.0.1:0"},
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
				if dataplane.IsInvalidOption(err) != c.wantOptError {
					t.Errorf("Serve's error %v is an OptionError: %v, want %v", err, !c.wantOptError, c.wantOptError)
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
			var line struct{ Addr, Name string }
			if err := json.Unmarshal(logged.Bytes(), &line); err != nil || line.Name != name {
				t.Fatalf("Serve logged %q (%v), want the proxies' address and the control plane's name", logged.String(), err)
			}
			conn, err := net.DialTimeout("tcp", line.Addr, 10*time.Second)
			if err != nil {
				t.Fatalf("the proxies' APIs are not served at %s: %v", line.Addr, err)
			}
			conn.Close()
			stop()
			select {
			case err := <-served: // Stop may come before Serve started
				if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
					t.Errorf("the proxies' server ended with %v, want its stop", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the proxies' server did not end within 10s of stop")
			}
			if conn, err := net.DialTimeout("tcp", line.Addr, time.Second); err == nil {
				conn.Close()
				t.Errorf("the proxies' APIs are still served at %s after stop", line.Addr)
			}
		})
	}
}

// readPEM reads a credential file whole.
func readPEM(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
