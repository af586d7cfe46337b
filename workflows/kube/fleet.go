package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/irs-sim/irs/internal/token"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fleet reaches the workers of a namespace that IRS made (a run's, or the Helm chart's) the way a run does:
// through its relay, with its control token.
type Fleet struct {
	c    *client
	ns   string
	fw   *forwarder
	conn *grpc.ClientConn
}

// Member is one worker of a Fleet.
type Member struct {
	Pod, IP string
	Ready   bool
	Client  irsv1.WorkerControlServiceClient
}

// Connect reaches the relay of a namespace. An empty tok is read from the namespace's Secret
// irs-control-token (which needs permission to get secrets).
func Connect(ctx context.Context, a Access, ns, tok string) (*Fleet, error) {
	c, err := connect(a)
	if err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	if _, err := c.version(ctx); err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	if tok == "" {
		s := &corev1.Secret{}
		if err := c.get(ctx, c.core, ns, "secrets", tokenSecret, s); err != nil {
			return nil, &EnvironmentError{Err: fmt.Errorf("the control token of namespace %s (Secret %s; or give "+
				"--token-file): %w", ns, tokenSecret, err)}
		}
		tok = string(s.Data["token"])
	}
	b := &Backend{c: c, cfg: Config{Namespace: ns}}
	pick := func(ctx context.Context) (string, error) { return b.readyPod(ctx, LabelName+"=irs-relay") }
	fw, err := newForwarder(ctx, c, ns, RelayPort, time.Now().Add(30*time.Second), pick)
	if err != nil {
		return nil, &EnvironmentError{Err: fmt.Errorf("the relay of namespace %s: %w", ns, err)}
	}
	conn, err := grpc.NewClient("passthrough:///"+fw.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(token.Bearer(tok)))
	if err != nil {
		fw.stop()
		return nil, err
	}
	return &Fleet{c: c, ns: ns, fw: fw, conn: conn}, nil
}

// Members returns the pods of a service, oldest first, each with a client of its control API.
func (f *Fleet) Members(ctx context.Context, service string) ([]Member, error) {
	list := &corev1.PodList{}
	sel := LabelName + "=irs-worker," + LabelService + "=" + service
	if err := f.c.list(ctx, f.c.core, f.ns, "pods", metav1.ListOptions{LabelSelector: sel}, list); err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no pod of service %s in namespace %s", service, f.ns)
	}
	pods := make([]*pod, 0, len(list.Items))
	ready := map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		pods = append(pods, &pod{name: p.Name, ip: p.Status.PodIP, created: p.CreationTimestamp.Time})
		ready[p.Name] = podReady(p)
	}
	sortPods(pods)
	var out []Member
	for _, p := range pods {
		m := Member{Pod: p.name, IP: p.ip, Ready: ready[p.name]}
		if p.ip != "" {
			m.Client = irsv1.NewWorkerControlServiceClient(routed{cc: f.conn, target: net.JoinHostPort(p.ip, strconv.Itoa(ControlPort))})
		}
		out = append(out, m)
	}
	return out, nil
}

// Close closes the connection and the port-forward.
func (f *Fleet) Close() {
	_ = f.conn.Close()
	f.fw.stop()
}

// PersistConfig writes a service's configuration where its pods read theirs at start (ConfigMap
// <service>-worker, key worker.json, as the backend and the chart make it), so that a restarted or replacement
// pod keeps a change made live, and returns the ConfigMap's name. (A live change alone was lost at the next
// restart, silently.) A helm upgrade writes the chart's values back.
func (f *Fleet) PersistConfig(ctx context.Context, service string, cfg *irsv1.WorkerConfig) (string, error) {
	doc, err := protojson.MarshalOptions{UseProtoNames: true, Indent: "  "}.Marshal(cfg)
	if err != nil {
		return "", err
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]string{"worker.json": string(doc)}})
	if err != nil {
		return "", err
	}
	name := service + "-worker"
	if err := f.c.mergePatch(ctx, f.c.core, f.ns, "configmaps", name, patch); err != nil {
		return "", fmt.Errorf("configmap %s: %w", name, err)
	}
	return name, nil
}
