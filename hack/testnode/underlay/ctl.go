package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

type stringsFlag []string

func (f *stringsFlag) String() string     { return strings.Join(*f, " ") }
func (f *stringsFlag) Set(s string) error { *f = append(*f, s); return nil }

// ctl changes the running underlay from the command line (link.sh): it reads the state, changes what the flags
// say, sets it and prints it.
func ctl(args []string) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	socket := fs.String("socket", "", "the underlay's socket")
	reset := fs.Bool("reset", false, "start from a plain network: every node up, no link shaped")
	defLink := fs.String("link", "", "the link between every two nodes: delay=..,jitter=..,loss=..,rate=..")
	var pairs, partitions, down, up stringsFlag
	fs.Var(&pairs, "pair", "the link one way between two nodes: FROM>TO=delay=..,loss=.. (repeat)")
	fs.Var(&partitions, "partition", "no packet either way between two nodes: A,B (repeat)")
	fs.Var(&down, "down", "cut a node off (repeat)")
	fs.Var(&up, "up", "bring a node back (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := irsv1.NewUnderlayServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := client.GetUnderlay(ctx, &irsv1.GetUnderlayRequest{})
	if err != nil {
		return fmt.Errorf("get the underlay's state: %w", err)
	}
	st := got.GetState()
	if *reset {
		st = &irsv1.UnderlayState{}
	}
	if *defLink != "" {
		if st.DefaultLink, err = parseLinkFlag(*defLink); err != nil {
			return err
		}
	}
	for _, p := range pairs {
		ends, spec, _ := strings.Cut(p, "=")
		from, to, ok := strings.Cut(ends, ">")
		l, err := parseLinkFlag(spec)
		if !ok || err != nil {
			return fmt.Errorf("--pair %q: want FROM>TO=delay=..: %v", p, err)
		}
		st.Pairs = append(st.Pairs, &irsv1.PairLink{From: from, To: to, Link: l})
	}
	for _, p := range partitions {
		a, b, ok := strings.Cut(p, ",")
		if !ok {
			return fmt.Errorf("--partition %q: want A,B", p)
		}
		st.Pairs = append(st.Pairs, &irsv1.PairLink{From: a, To: b, Link: &irsv1.Link{Loss: "100%"}},
			&irsv1.PairLink{From: b, To: a, Link: &irsv1.Link{Loss: "100%"}})
	}
	for _, n := range down {
		st.Nodes = append(st.Nodes, &irsv1.UnderlayNode{Name: n, Down: true})
	}
	for _, n := range up {
		st.Nodes = append(st.Nodes, &irsv1.UnderlayNode{Name: n, Down: false})
	}
	// A node named twice keeps the last word: Get's list comes first, the flags after.
	set, err := client.SetUnderlay(ctx, &irsv1.SetUnderlayRequest{State: st})
	if err != nil {
		return fmt.Errorf("set the underlay's state: %w", err)
	}
	fmt.Println(protojson.Format(set.GetState()))
	return nil
}
