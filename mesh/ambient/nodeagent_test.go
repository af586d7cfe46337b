package ambient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// watchInterval is how often the agents of these tests look for pods that are gone.
const watchInterval = 50 * time.Millisecond

// runAgent runs a node agent in a new directory until the end of the test, once both its sockets listen.
func runAgent(t *testing.T) (*NodeAgent, string) {
	t.Helper()
	dir := t.TempDir()
	return runAgentIn(t, dir, ackTimeout), dir
}

// runAgentIn runs a node agent in dir, waiting ackTimeout for each of ztunnel's acknowledgements, until the
// end of the test, once both its sockets listen.
func runAgentIn(t *testing.T, dir string, ackTimeout time.Duration) *NodeAgent {
	t.Helper()
	a := NewNodeAgent(slog.New(slog.DiscardHandler))
	a.AckTimeout = ackTimeout
	t.Cleanup(startAgent(t, a, dir))
	return a
}

// startAgent runs a in dir once both its sockets listen; the function it returns stops it (once) and checks
// that Run returned in time.
func startAgent(t *testing.T, a *NodeAgent, dir string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, dir, watchInterval) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(wait):
				t.Errorf("Run did not return %s after its context ended", wait)
			}
		})
	}
	for _, name := range []string{ZDSSocket, EnrolSocket} {
		path := filepath.Join(dir, name)
		waitFor(t, path+" listening", func() bool { return listening(t, path) })
	}
	return stop
}

// listening is whether a seqpacket socket listens at path (in /proc/net/unix: type 0005, flag __SO_ACCEPTCON).
func listening(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		if fs := strings.Fields(sc.Text()); len(fs) == 8 && fs[7] == path && fs[3] == "00010000" && fs[4] == "0005" {
			return true
		}
	}
	return false
}

// waitFor polls ok until it holds, failing the test after wait.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// netnsInode is the inode of a network namespace file.
func netnsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// fakeZtunnel plays ztunnel on the agent's ZDS socket.
type fakeZtunnel struct {
	t *testing.T
	c *net.UnixConn
}

// connectZtunnel connects to the agent in dir and says hello, as ztunnel does at start.
func connectZtunnel(t *testing.T, dir string) *fakeZtunnel {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, ZDSSocket), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	z := &fakeZtunnel{t: t, c: c}
	z.write(&zdspb.ZdsHello{Version: zdspb.Version_V1})
	return z
}

func (z *fakeZtunnel) write(m proto.Message) {
	z.t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		z.t.Fatal(err)
	}
	_ = z.c.SetWriteDeadline(time.Now().Add(wait))
	if _, err := z.c.Write(b); err != nil {
		z.t.Fatalf("ztunnel write %v: %v", m, err)
	}
}

// next is the agent's next request, with the inodes of the file descriptors that came with it (closed here).
func (z *fakeZtunnel) next(what string) (*zdspb.WorkloadRequest, []uint64) {
	z.t.Helper()
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	_ = z.c.SetReadDeadline(time.Now().Add(wait))
	n, oobn, flags, _, err := z.c.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		z.t.Fatalf("%s: ztunnel read: %d bytes, %v", what, n, err)
	}
	var inodes []uint64
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			z.t.Fatalf("%s: %v", what, err)
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				z.t.Fatalf("%s: %v", what, err)
			}
			for _, fd := range fds {
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil {
					z.t.Errorf("%s: fstat the file descriptor: %v", what, err)
				}
				_ = unix.Close(fd)
				inodes = append(inodes, st.Ino)
			}
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		z.t.Errorf("%s: more than one file descriptor", what)
	}
	req := &zdspb.WorkloadRequest{}
	if err := proto.Unmarshal(buf[:n], req); err != nil {
		z.t.Fatalf("%s: %v", what, err)
	}
	return req, inodes
}

// ack acknowledges the last request: ztunnel has made (or removed) the pod's listeners, or says why not.
func (z *fakeZtunnel) ack(refusal string) {
	z.t.Helper()
	z.write(&zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{Error: refusal}}})
}

// expectAdd takes the next request, which must add exactly add with the network namespace inode, and
// acknowledges it (with refusal, if any).
func (z *fakeZtunnel) expectAdd(what string, add *zdspb.AddWorkload, inode uint64, refusal string) {
	z.t.Helper()
	req, inodes := z.next(what)
	if !proto.Equal(req.GetAdd(), add) || !slices.Equal(inodes, []uint64{inode}) {
		z.t.Fatalf("%s: %v with namespaces %v, want add %v with namespace %d", what, req, inodes, add, inode)
	}
	z.ack(refusal)
}

// expectSnapshotSent takes the next request, which must end the snapshot, and acknowledges it.
func (z *fakeZtunnel) expectSnapshotSent(what string) {
	z.t.Helper()
	req, inodes := z.next(what)
	if req.GetSnapshotSent() == nil || len(inodes) != 0 {
		z.t.Fatalf("%s: %v with namespaces %v, want snapshot sent", what, req, inodes)
	}
	z.ack("")
}

// expectClosed waits for the agent to close the connection.
func (z *fakeZtunnel) expectClosed(what string) {
	z.t.Helper()
	_ = z.c.SetReadDeadline(time.Now().Add(wait))
	n, _, _, _, err := z.c.ReadMsgUnix(make([]byte, 4096), nil)
	if n != 0 || (err != nil && !errors.Is(err, io.EOF)) {
		z.t.Errorf("%s: read %d bytes, %v, want the connection closed", what, n, err)
	}
}

// pod is an enrolment of pod uid.
func pod(uid, name string) *zdspb.AddWorkload {
	return &zdspb.AddWorkload{Uid: uid, WorkloadInfo: &zdspb.WorkloadInfo{Name: name, Namespace: "ns1", ServiceAccount: "sa"}}
}

// enrol enrols add with the agent in dir, from a goroutine that ends within 2×wait whatever happens.
func enrol(dir string, add *zdspb.AddWorkload) <-chan error {
	out := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
		defer cancel()
		out <- Enrol(ctx, filepath.Join(dir, EnrolSocket), add)
	}()
	return out
}

// enrolled is Enrol's outcome, failing the test after wait.
func enrolled(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		t.Fatalf("%s: Enrol did not return in %s", what, wait)
		return nil
	}
}

// TestNodeAgentEnrolBeforeZtunnel: a pod enrolled before ztunnel connects waits; ztunnel's snapshot carries it
// with the pod's network namespace (the enrolling thread's), then "snapshot sent"; the pod's Enrol returns once
// ztunnel has acknowledged it.
func TestNodeAgentEnrolBeforeZtunnel(t *testing.T) {
	a, dir := runAgent(t)
	self := netnsInode(t, "/proc/self/ns/net")
	add := pod("u1", "p1")
	done := enrol(dir, add)
	waitFor(t, "the agent holds u1", func() bool { return slices.Equal(a.Pods(), []string{"u1"}) })
	select {
	case err := <-done:
		t.Fatalf("Enrol returned (%v) before ztunnel connected", err)
	default:
	}
	z := connectZtunnel(t, dir)
	z.expectAdd("snapshot", add, self, "")
	z.expectSnapshotSent("end of the snapshot")
	if err := enrolled(t, "u1", done); err != nil {
		t.Errorf("Enrol of u1: %v", err)
	}
	if got := a.Pods(); !slices.Equal(got, []string{"u1"}) {
		t.Errorf("Pods() = %v, want [u1]", got)
	}
}

// TestNodeAgentEnrolWhileConnected: with ztunnel connected (an empty snapshot first), each pod enrolled is added
// at once, and its Enrol returns ztunnel's answer, a refusal included.
func TestNodeAgentEnrolWhileConnected(t *testing.T) {
	a, dir := runAgent(t)
	self := netnsInode(t, "/proc/self/ns/net")
	z := connectZtunnel(t, dir)
	z.expectSnapshotSent("empty snapshot")

	done := enrol(dir, pod("u1", "p1"))
	z.expectAdd("u1", pod("u1", "p1"), self, "")
	if err := enrolled(t, "u1", done); err != nil {
		t.Errorf("Enrol of u1: %v", err)
	}
	done = enrol(dir, pod("u2", "p2"))
	z.expectAdd("u2", pod("u2", "p2"), self, "boom")
	if err := enrolled(t, "u2", done); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Enrol of u2, which ztunnel refused: %v, want ztunnel's refusal (boom)", err)
	}
	if got := a.Pods(); !slices.Contains(got, "u1") {
		t.Errorf("Pods() = %v, want u1 among them", got)
	}
	// A refusal is ztunnel's answer about that pod alone: the connection stays for the next.
	done = enrol(dir, pod("u3", "p3"))
	z.expectAdd("u3, on the connection that refused u2", pod("u3", "p3"), self, "")
	if err := enrolled(t, "u3", done); err != nil {
		t.Errorf("Enrol of u3: %v", err)
	}
}

// TestNodeAgentLetsGoOfASilentZtunnel: a ztunnel that does not acknowledge a pod in time loses its connection
// (a late acknowledgement would read as the next message's); the pod is in the snapshot of the next one.
func TestNodeAgentLetsGoOfASilentZtunnel(t *testing.T) {
	dir := t.TempDir()
	a := runAgentIn(t, dir, time.Second)
	self := netnsInode(t, "/proc/self/ns/net")
	first := connectZtunnel(t, dir)
	first.expectSnapshotSent("empty snapshot")
	done := enrol(dir, pod("u1", "p1"))
	if req, _ := first.next("u1"); !proto.Equal(req.GetAdd(), pod("u1", "p1")) {
		t.Fatalf("u1: %v, want add u1", req)
	}
	first.expectClosed("the connection that did not acknowledge u1")

	second := connectZtunnel(t, dir)
	second.expectAdd("second snapshot, u1", pod("u1", "p1"), self, "")
	second.expectSnapshotSent("end of the second snapshot")
	if err := enrolled(t, "u1", done); err != nil {
		t.Errorf("Enrol of u1, taken by the second connection: %v", err)
	}
	if got := a.Pods(); !slices.Equal(got, []string{"u1"}) {
		t.Errorf("Pods() = %v, want [u1]", got)
	}
}

// TestNodeAgentZtunnelReconnects: a new ztunnel connection (ztunnel restarted) replaces the old one, gets a
// snapshot of every pod held, and gets the pods enrolled after.
func TestNodeAgentZtunnelReconnects(t *testing.T) {
	a, dir := runAgent(t)
	self := netnsInode(t, "/proc/self/ns/net")
	first := connectZtunnel(t, dir)
	first.expectSnapshotSent("first snapshot")
	for _, add := range []*zdspb.AddWorkload{pod("u2", "p2"), pod("u1", "p1")} {
		done := enrol(dir, add)
		first.expectAdd(add.GetUid(), add, self, "")
		if err := enrolled(t, add.GetUid(), done); err != nil {
			t.Fatalf("Enrol of %s: %v", add.GetUid(), err)
		}
	}

	second := connectZtunnel(t, dir)
	second.expectAdd("second snapshot, u1", pod("u1", "p1"), self, "")
	second.expectAdd("second snapshot, u2", pod("u2", "p2"), self, "")
	second.expectSnapshotSent("end of the second snapshot")
	first.expectClosed("the replaced connection")

	done := enrol(dir, pod("u3", "p3"))
	second.expectAdd("u3", pod("u3", "p3"), self, "")
	if err := enrolled(t, "u3", done); err != nil {
		t.Errorf("Enrol of u3: %v", err)
	}
	if got := a.Pods(); !slices.Equal(got, []string{"u1", "u2", "u3"}) {
		t.Errorf("Pods() = %v, want [u1 u2 u3]", got)
	}
}

// TestNodeAgentSnapshotGoesOnAfterARefusal: ztunnel refusing one pod of the snapshot does not cost it the rest
// of the snapshot (as istio-cni: the refusal is logged, the snapshot goes on); otherwise a pod ztunnel cannot
// take would break every connection of every restarted ztunnel.
func TestNodeAgentSnapshotGoesOnAfterARefusal(t *testing.T) {
	_, dir := runAgent(t)
	self := netnsInode(t, "/proc/self/ns/net")
	first := connectZtunnel(t, dir)
	first.expectSnapshotSent("first snapshot")
	for _, add := range []*zdspb.AddWorkload{pod("u1", "p1"), pod("u2", "p2")} {
		done := enrol(dir, add)
		first.expectAdd(add.GetUid(), add, self, "")
		if err := enrolled(t, add.GetUid(), done); err != nil {
			t.Fatalf("Enrol of %s: %v", add.GetUid(), err)
		}
	}
	second := connectZtunnel(t, dir)
	second.expectAdd("second snapshot, u1", pod("u1", "p1"), self, "no room for u1")
	second.expectAdd("second snapshot after refusing u1", pod("u2", "p2"), self, "")
	second.expectSnapshotSent("end of the second snapshot")
}

// TestEnrolRefusals: an enrolment without the pod's uid, name or namespace, or with a uid that is a path, is
// refused (and not held), and so is one where no agent listens.
func TestEnrolRefusals(t *testing.T) {
	a, dir := runAgent(t)
	z := connectZtunnel(t, dir)
	z.expectSnapshotSent("empty snapshot")
	for _, add := range []*zdspb.AddWorkload{
		{Uid: "u1", WorkloadInfo: &zdspb.WorkloadInfo{Namespace: "ns1", ServiceAccount: "sa"}},
		{Uid: "u1", WorkloadInfo: &zdspb.WorkloadInfo{Name: "p1", ServiceAccount: "sa"}},
		{WorkloadInfo: &zdspb.WorkloadInfo{Name: "p1", Namespace: "ns1", ServiceAccount: "sa"}},
		{Uid: "u1"},
	} {
		if err := enrolled(t, add.String(), enrol(dir, add)); err == nil || !strings.Contains(err.Error(), "required") {
			t.Errorf("Enrol %v: %v, want the missing field refused", add, err)
		}
	}
	// The uid names the pod's record file: one that could name another file is refused.
	for _, uid := range []string{"../u1", "..", "a/b"} {
		if err := enrolled(t, uid, enrol(dir, pod(uid, "p1"))); err == nil || !strings.Contains(err.Error(), "not a pod's uid") {
			t.Errorf("Enrol with uid %q: %v, want it refused", uid, err)
		}
	}
	if got := a.Pods(); len(got) != 0 {
		t.Errorf("Pods() = %v after refused enrolments, want none", got)
	}
	// Where no agent comes, Enrol gives up when its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Enrol(ctx, filepath.Join(t.TempDir(), EnrolSocket), pod("u1", "p1")) }()
	if err := enrolled(t, "no agent", done); err == nil {
		t.Error("Enrol where no agent listens: no error")
	}
}

// TestEnrolWaitsForTheAgent: a pod may enrol before its node's agent has started (both start with the run);
// Enrol waits for the agent's socket and then for ztunnel, within its context.
func TestEnrolWaitsForTheAgent(t *testing.T) {
	dir := t.TempDir()
	done := enrol(dir, pod("u1", "p1"))
	select {
	case err := <-done:
		t.Fatalf("Enrol returned (%v) with no agent listening", err)
	case <-time.After(100 * time.Millisecond): // it would fail at once if it did not wait
	}
	a := runAgentIn(t, dir, ackTimeout)
	waitFor(t, "the agent holds u1", func() bool { return slices.Equal(a.Pods(), []string{"u1"}) })
	z := connectZtunnel(t, dir)
	z.expectAdd("snapshot", pod("u1", "p1"), netnsInode(t, "/proc/self/ns/net"), "")
	z.expectSnapshotSent("end of the snapshot")
	if err := enrolled(t, "u1", done); err != nil {
		t.Errorf("Enrol of u1: %v", err)
	}
}

// enrolHelperEnv, when set, makes TestEnrolHelperProcess the pod of TestNodeAgentRemovesGonePod: it names the
// agent's enrolment socket.
const enrolHelperEnv = "IRS_AMBIENT_TEST_ENROL_SOCKET"

// TestEnrolHelperProcess is not a test: run by TestNodeAgentRemovesGonePod in a network namespace of its own, it
// enrols that namespace as pod "gone", as a pod's init container does, says how that went, and stays (the pod's
// process) until killed or 30 s have passed.
func TestEnrolHelperProcess(t *testing.T) {
	socket := os.Getenv(enrolHelperEnv)
	if socket == "" {
		t.Skip("only as the pod of TestNodeAgentRemovesGonePod")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	err := Enrol(ctx, socket, pod("gone", "p-gone"))
	cancel()
	fmt.Printf("enrolled: %v\n", err)
	time.Sleep(30 * time.Second)
	os.Exit(0)
}

// TestNodeAgentRemovesGonePod: a pod stays while a process is in its network namespace; once none is, ztunnel
// is told to delete it and the agent no longer holds it. The pod is this test binary run again in a network
// namespace of its own (unshare --net), where it enrols itself (TestEnrolHelperProcess).
func TestNodeAgentRemovesGonePod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	a, dir := runAgent(t)
	self := netnsInode(t, "/proc/self/ns/net")
	z := connectZtunnel(t, dir)
	z.expectSnapshotSent("empty snapshot")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	child := exec.CommandContext(ctx, unshare, "--net", os.Args[0], "-test.run=^TestEnrolHelperProcess$")
	child.Env = append(os.Environ(), enrolHelperEnv+"="+filepath.Join(dir, EnrolSocket))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	said := make(chan string, 1)
	exited := make(chan struct{}) // closed once it is reaped
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "enrolled: "); ok {
				said <- line
			}
		}
		_ = child.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = child.Process.Kill()
		select {
		case <-exited:
		case <-time.After(wait):
			t.Errorf("pid %d did not exit", child.Process.Pid)
		}
	})

	add := pod("gone", "p-gone")
	req, inodes := z.next("the pod")
	podNetns := netnsInode(t, fmt.Sprintf("/proc/%d/ns/net", child.Process.Pid))
	if podNetns == self || !proto.Equal(req.GetAdd(), add) || !slices.Equal(inodes, []uint64{podNetns}) {
		t.Fatalf("the pod: %v with namespaces %v, want add %v with namespace %d (not this process's %d)", req, inodes,
			add, podNetns, self)
	}
	z.ack("")
	select {
	case got := <-said:
		if got != "<nil>" {
			t.Fatalf("the pod's Enrol: %s", got)
		}
	case <-time.After(wait):
		t.Fatalf("the pod's Enrol did not return in %s", wait)
	}
	// Nothing says the agent looked and found the pod alive: let it look a few times.
	time.Sleep(5 * watchInterval)
	if got := a.Pods(); !slices.Equal(got, []string{"gone"}) {
		t.Fatalf("Pods() = %v while the pod's process runs, want [gone]", got)
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(wait):
		t.Fatalf("pid %d did not exit", child.Process.Pid)
	}
	req, inodes = z.next("the pod gone")
	if req.GetDel().GetUid() != "gone" || len(inodes) != 0 {
		t.Fatalf("after the pod's process exited: %v with namespaces %v, want del gone", req, inodes)
	}
	z.ack("")
	if got := a.Pods(); len(got) != 0 {
		t.Errorf("Pods() = %v after the pod was removed, want none", got)
	}
}

// TestNodeAgentStopsWithSilentConnections: connections that never say anything (a ztunnel without its hello, a
// pod without its enrolment) do not hold the agent past its context: Run returns within wait (runAgentIn's
// cleanup checks), where a read waiting for them would take the 15 s of an acknowledgement.
func TestNodeAgentStopsWithSilentConnections(t *testing.T) {
	dir := t.TempDir()
	var silent []*net.UnixConn
	t.Cleanup(func() { // after the agent's cleanup (cleanups run last first), so they are open while it stops
		for _, c := range silent {
			c.Close()
		}
	})
	runAgentIn(t, dir, ackTimeout)
	for _, name := range []string{ZDSSocket, EnrolSocket} {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	time.Sleep(100 * time.Millisecond) // the agent has accepted both (nothing says when it has)
}

// TestNodeAgentHoldsPodsAgainAfterARestart: an agent started again with the state directory of one that
// stopped holds the pods still running, with their network namespaces, and hands them to ztunnel; the records
// of pods that ended meanwhile, and records it cannot read, are dropped.
func TestNodeAgentHoldsPodsAgainAfterARestart(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	self := netnsInode(t, "/proc/self/ns/net")
	first := NewNodeAgent(slog.New(slog.DiscardHandler))
	first.StateDir = state
	stopFirst := startAgent(t, first, dir)
	t.Cleanup(stopFirst)
	z := connectZtunnel(t, dir)
	z.expectSnapshotSent("empty snapshot")
	done := enrol(dir, pod("u1", "p1"))
	z.expectAdd("u1", pod("u1", "p1"), self, "")
	if err := enrolled(t, "u1", done); err != nil {
		t.Fatalf("Enrol of u1: %v", err)
	}
	stopFirst()

	// A pod that ended while no agent ran (no process is in namespace inode 1), and a torn record.
	if err := os.WriteFile(filepath.Join(state, "ended.json"), []byte(`{"inode":1,"add":{"uid":"ended"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "torn.json"), []byte(`{"inode":`), 0o600); err != nil {
		t.Fatal(err)
	}
	second := NewNodeAgent(slog.New(slog.DiscardHandler))
	second.StateDir = state
	t.Cleanup(startAgent(t, second, dir))
	if got := second.Pods(); !slices.Equal(got, []string{"u1"}) {
		t.Errorf("Pods() of the agent started again = %v, want [u1]", got)
	}
	z = connectZtunnel(t, dir)
	z.expectAdd("snapshot of the agent started again", pod("u1", "p1"), self, "")
	z.expectSnapshotSent("end of the snapshot")
	entries, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"u1.json"}) {
		t.Errorf("state directory holds %v, want [u1.json] (the ended pod's and the torn record dropped)", names)
	}
}
