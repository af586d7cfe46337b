// Command underlay is the test cluster's network between nodes (hack/testnode): a delay line that shapes the pod
// traffic from one node to another (delay, jitter, loss, bandwidth), partitions nodes, and cuts a node off, as
// irs.v1.UnderlayService on a Unix socket. up.sh starts it in the control plane's network namespace, which is
// the router between the nodes; the kubernetes backend drives it for a workflow's link, partition and node
// actions.
//
//	underlay --socket S --tun irs-link --bridge irs-ul --node irs-node-1=10.99.0.11,10.244.1.0/24,ul-1 ...
//	underlay ctl --socket S [--reset] [--link SPEC] [--pair FROM>TO=SPEC] [--partition A,B] [--down N] [--up N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
)

type nodeFlags []node

func (f *nodeFlags) String() string { return fmt.Sprint(len(*f), " nodes") }

// Set parses name=ip,pod-cidr,link.
func (f *nodeFlags) Set(s string) error {
	name, rest, ok := strings.Cut(s, "=")
	parts := strings.Split(rest, ",")
	if !ok || name == "" || len(parts) != 3 {
		return fmt.Errorf("want name=ip,pod-cidr,link, got %q", s)
	}
	ip, err := netip.ParseAddr(parts[0])
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	pods, err := netip.ParsePrefix(parts[1])
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	*f = append(*f, node{name: name, ip: ip, pods: pods.Masked(), link: parts[2]})
	return nil
}

// parseLinkFlag parses "delay=300us,jitter=50us,loss=0.1%,rate=1G" into a Link.
func parseLinkFlag(s string) (*irsv1.Link, error) {
	l := &irsv1.Link{}
	for kv := range strings.SplitSeq(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "delay":
			l.Delay = v
		case "jitter":
			l.Jitter = v
		case "loss":
			l.Loss = v
		case "rate":
			l.Rate = v
		default:
			return nil, fmt.Errorf("link %q: unknown setting %q (want delay, jitter, loss, rate)", s, k)
		}
	}
	return l, nil
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(os.Args) > 1 && os.Args[1] == "ctl" {
		if err := ctl(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "underlay ctl:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(log); err != nil {
		log.Error("underlay", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	var nodes nodeFlags
	socket := flag.String("socket", "", "serve irs.v1.UnderlayService on this Unix socket (mode 0600)")
	tunName := flag.String("tun", "irs-link", "the TUN device pod traffic between nodes is routed into")
	bridge := flag.String("bridge", "irs-ul", "the underlay bridge")
	table := flag.Int("table", 100, "the routing table that sends pod traffic into the TUN")
	defLink := flag.String("link", "", "the link between every two nodes at start, e.g. delay=300us,jitter=50us,loss=0.1%,rate=1G")
	flag.Var(&nodes, "node", "a node: name=ip,pod-cidr,link-on-bridge (repeat for each)")
	flag.Parse()
	if *socket == "" || len(nodes) == 0 {
		return errors.New("--socket and at least one --node are needed")
	}
	def, err := parseLinkFlag(*defLink)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	tun, err := openTUN(*tunName)
	if err != nil {
		return err
	}
	plain, err := compile(&irsv1.UnderlayState{}, nodes)
	if err != nil {
		return err
	}
	l := newLine(tun, plain, log)
	netw := ipNetwork{bridge: *bridge, table: *table, pref: *table}
	_ = netw.throughLine(false) // a rule an earlier run left
	srv, err := newServer(nodes, l, netw, &irsv1.UnderlayState{DefaultLink: def})
	if err != nil {
		return err
	}
	_ = os.Remove(*socket)
	lis, err := net.Listen("unix", *socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *socket, err)
	}
	if err := os.Chmod(*socket, 0o600); err != nil {
		return fmt.Errorf("restrict %s: %w", *socket, err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(1 << 20))
	irsv1.RegisterUnderlayServiceServer(gs, srv)
	irsv1.RegisterContainerFaultServiceServer(gs, &containers{root: "/sys/fs/cgroup"})
	go func() { <-ctx.Done(); gs.Stop() }()
	lineDone := make(chan error, 1)
	go func() { lineDone <- l.run(ctx, uint64(time.Now().UnixNano())) }()
	log.Info("underlay serving", "socket", *socket, "nodes", len(nodes), "link", *defLink)
	serveErr := gs.Serve(lis)
	stop()
	lineErr := <-lineDone
	// Leave the network plain: every node up, nothing routed into a TUN nobody reads.
	srv.mu.Lock()
	_ = srv.apply(plain, &irsv1.UnderlayState{})
	srv.mu.Unlock()
	log.Info("underlay stopped", "forwarded", l.forwarded.Load(), "delayed", l.delayed.Load(), "lost", l.lost.Load(),
		"overflowed", l.overflowed.Load(), "write_errors", l.writeErrors.Load())
	return errors.Join(serveErr, lineErr)
}
