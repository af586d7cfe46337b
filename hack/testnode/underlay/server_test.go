package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recordingNetwork stands in for iproute2 in a unit test (the real one is used by the cluster's tests): it records
// what was asked and fails when told to.
type recordingNetwork struct {
	calls  []string
	failOn string
}

func (r *recordingNetwork) setLinkUp(name string, up bool) error {
	c := fmt.Sprintf("link %s up=%v", name, up)
	if c == r.failOn {
		return errors.New("refused")
	}
	r.calls = append(r.calls, c)
	return nil
}

func (r *recordingNetwork) throughLine(on bool) error {
	c := fmt.Sprintf("line %v", on)
	if c == r.failOn {
		return errors.New("refused")
	}
	r.calls = append(r.calls, c)
	return nil
}

func newTestServer(t *testing.T) (*server, *recordingNetwork) {
	t.Helper()
	plain, err := compile(&irsv1.UnderlayState{}, testNodes())
	if err != nil {
		t.Fatal(err)
	}
	n := &recordingNetwork{}
	s, err := newServer(testNodes(), newLine(nil, plain, slog.Default()), n, &irsv1.UnderlayState{})
	if err != nil {
		t.Fatal(err)
	}
	return s, n
}

func TestSetAppliesAndReportsTheState(t *testing.T) {
	s, n := newTestServer(t)
	ctx := context.Background()
	resp, err := s.SetUnderlay(ctx, &irsv1.SetUnderlayRequest{State: &irsv1.UnderlayState{
		Nodes:       []*irsv1.UnderlayNode{{Name: "irs-node-2", Down: true}},
		DefaultLink: &irsv1.Link{Delay: "300us"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetState()
	if fmt.Sprint(n.calls) != "[link ul-2 up=false line true]" {
		t.Errorf("calls %v", n.calls)
	}
	if len(got.GetNodes()) != 3 || !got.GetNodes()[1].GetDown() || got.GetNodes()[1].GetPodCidr() != "10.244.2.0/24" ||
		got.GetDefaultLink().GetDelay() != "300us" {
		t.Errorf("state %v", got)
	}
	if !s.line.model.Load().shaped {
		t.Error("the line did not take the new model")
	}
	// Back to plain: the node comes up, and the kernel stops routing into the line.
	n.calls = nil
	if _, err := s.SetUnderlay(ctx, &irsv1.SetUnderlayRequest{State: &irsv1.UnderlayState{}}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(n.calls) != "[link ul-2 up=true line false]" {
		t.Errorf("calls %v", n.calls)
	}
}

func TestSetKeepsTheLastGoodState(t *testing.T) {
	s, n := newTestServer(t)
	ctx := context.Background()
	good := &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Delay: "1ms"}}
	if _, err := s.SetUnderlay(ctx, &irsv1.SetUnderlayRequest{State: good}); err != nil {
		t.Fatal(err)
	}
	before := s.line.model.Load()
	_, err := s.SetUnderlay(ctx, &irsv1.SetUnderlayRequest{State: &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Loss: "lots"}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
	// A failure half-way (the second node's link) puts the first back.
	n.calls, n.failOn = nil, "link ul-3 up=false"
	_, err = s.SetUnderlay(ctx, &irsv1.SetUnderlayRequest{State: &irsv1.UnderlayState{
		Nodes: []*irsv1.UnderlayNode{{Name: "irs-node-2", Down: true}, {Name: "irs-node-3", Down: true}}}})
	if status.Code(err) != codes.Internal {
		t.Fatalf("got %v, want Internal", err)
	}
	if fmt.Sprint(n.calls) != "[link ul-2 up=false link ul-2 up=true]" {
		t.Errorf("calls %v: the first node's change was not undone", n.calls)
	}
	if s.line.model.Load() != before {
		t.Error("the line's model changed on a refused state")
	}
	resp, _ := s.GetUnderlay(ctx, &irsv1.GetUnderlayRequest{})
	got := resp.GetState()
	if got.GetDefaultLink().GetDelay() != "1ms" || got.GetNodes()[1].GetDown() {
		t.Errorf("state after refusals %v", got)
	}
}
