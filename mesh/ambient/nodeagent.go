package ambient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// Socket names in a node agent's directory.
const (
	ZDSSocket   = "ztunnel.sock" // ztunnel connects here (INPOD_UDS)
	EnrolSocket = "enrol.sock"   // each meshed pod's init container enrols here
)

// ackTimeout bounds how long ztunnel may take to acknowledge one message (it creates the pod's listeners), by
// default.
const ackTimeout = 15 * time.Second

// NodeAgent does istio-cni's node agent's job for IRS: it holds the network namespace of every meshed pod on its
// node and hands each to ztunnel over the ZDS protocol (a seqpacket Unix socket: ztunnel says hello, the agent
// sends every pod it holds with its namespace as a file descriptor, then "snapshot sent", then each pod added or
// gone; ztunnel acknowledges each message once it has made, or removed, that pod's listeners). Pods enrol
// themselves: their init container sends the agent its own network namespace. A pod is gone when no process is
// left in its namespace (the agent sees the node's processes), and ztunnel is told so.
type NodeAgent struct {
	log *slog.Logger
	// AckTimeout bounds how long ztunnel may take to acknowledge one message; a connection that does not answer
	// in time is let go (ztunnel reconnects and gets a snapshot).
	AckTimeout time.Duration
	// StateDir, when set, keeps a record of every enrolled pod, so that the agent started again with it holds
	// the pods still running (a pod enrols once; without them, ztunnel would drop every pod on the node).
	StateDir string

	mu        sync.Mutex
	workloads map[string]*podNetns // uid →
	conn      *zdsConn             // ztunnel's connection, nil while none
}

// podNetns is an enrolled pod.
type podNetns struct {
	add   *zdspb.AddWorkload
	inode uint64
	acked chan error // receives the outcome of ztunnel's first acknowledgement
	once  sync.Once

	mu     sync.Mutex // the namespace is not closed while it is being sent
	netns  *os.File
	closed bool
}

// close lets go of the pod's namespace (once no send is using it).
func (p *podNetns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		_ = p.netns.Close()
	}
}

func (p *podNetns) done(err error) { p.once.Do(func() { p.acked <- err }) }

// NewNodeAgent returns an agent holding no pod.
func NewNodeAgent(log *slog.Logger) *NodeAgent {
	return &NodeAgent{log: log, AckTimeout: ackTimeout, workloads: map[string]*podNetns{}}
}

// Run serves ztunnel and the pods in dir until ctx ends, and watches for pods that are gone every interval.
func (a *NodeAgent) Run(ctx context.Context, dir string, interval time.Duration) error {
	if a.StateDir != "" {
		pods, errs := loadRecords(a.StateDir)
		for _, err := range errs {
			a.log.Warn("node agent: a pod's record", "err", err)
		}
		a.mu.Lock()
		for _, w := range pods {
			a.workloads[w.add.GetUid()] = w
		}
		a.mu.Unlock()
		if len(pods) > 0 {
			a.log.Info("node agent: pods held again from the agent's state", "pods", len(pods))
		}
	}
	zds, err := listenPacket(filepath.Join(dir, ZDSSocket))
	if err != nil {
		return err
	}
	enrol, err := listenPacket(filepath.Join(dir, EnrolSocket))
	if err != nil {
		_ = zds.Close()
		return err
	}
	// Every goroutine of the agent is one of wg's: the namespaces are closed once none can use them.
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		_ = zds.Close()
		_ = enrol.Close()
		a.mu.Lock()
		if a.conn != nil {
			_ = a.conn.c.Close() // unblocks a send waiting for its acknowledgement
		}
		a.mu.Unlock()
	})
	wg.Go(func() { a.acceptZtunnel(ctx, zds, &wg) })
	wg.Go(func() { a.acceptPods(ctx, enrol, &wg) })
	wg.Go(func() { a.watchGone(ctx, interval) })
	wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, w := range a.workloads {
		w.close()
		delete(a.workloads, uid)
	}
	a.conn = nil
	return nil
}

func listenPacket(path string) (*net.UnixListener, error) {
	_ = os.Remove(path) // a socket left by an earlier agent on this node
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("node agent: listen on %s: %w", path, err)
	}
	return l, nil
}

// acceptZtunnel serves one ztunnel connection at a time: a new one (ztunnel restarted) replaces the old.
func (a *NodeAgent) acceptZtunnel(ctx context.Context, l *net.UnixListener, wg *sync.WaitGroup) {
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				a.log.Error("node agent: accept ztunnel", "err", err)
			}
			return
		}
		z := &zdsConn{c: uc, timeout: a.AckTimeout}
		wg.Go(func() { a.serveZtunnel(ctx, z) })
	}
}

func (a *NodeAgent) serveZtunnel(ctx context.Context, z *zdsConn) {
	// Until the connection is the agent's (which closes it when ctx ends), ctx ending closes it.
	stop := context.AfterFunc(ctx, func() { _ = z.c.Close() })
	hello := &zdspb.ZdsHello{}
	err := z.read(hello)
	stop()
	if err != nil {
		if ctx.Err() == nil {
			a.log.Error("node agent: ztunnel's hello", "err", err)
		}
		_ = z.c.Close()
		return
	}
	z.mu.Lock()
	a.mu.Lock()
	if ctx.Err() != nil { // the agent is stopping
		a.mu.Unlock()
		z.mu.Unlock()
		_ = z.c.Close()
		return
	}
	if old := a.conn; old != nil {
		_ = old.c.Close()
	}
	a.conn = z
	pods := make([]*podNetns, 0, len(a.workloads))
	for _, w := range a.workloads {
		pods = append(pods, w)
	}
	a.mu.Unlock()
	sort.Slice(pods, func(i, j int) bool { return pods[i].add.GetUid() < pods[j].add.GetUid() })
	a.log.Info("node agent: ztunnel connected", "version", hello.GetVersion().String(), "pods", len(pods))
	for _, w := range pods {
		// A pod ztunnel refuses is its answer for that pod (the pod's enrolment says so); the snapshot goes on.
		if err = z.sendAdd(w); err != nil && isTransport(err) {
			break
		}
		err = nil
	}
	if err == nil {
		err = z.send(&zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_SnapshotSent{SnapshotSent: &zdspb.SnapshotSent{}}}, nil)
	}
	z.mu.Unlock()
	if err != nil {
		a.log.Error("node agent: snapshot to ztunnel", "err", err)
		a.drop(z)
		return
	}
	// The connection stays until ztunnel reconnects (replacing it) or a send fails.
}

// sendOrDrop sends one message to ztunnel (send holds z's lock) and lets go of the connection when the send
// failed for want of an answer: a late acknowledgement would otherwise read as the next message's. A refusal
// keeps the connection: it is ztunnel's answer about that pod alone.
func (a *NodeAgent) sendOrDrop(z *zdsConn, send func() error) error {
	z.mu.Lock()
	err := send()
	z.mu.Unlock()
	if err != nil && isTransport(err) {
		a.drop(z)
	}
	return err
}

func (a *NodeAgent) drop(z *zdsConn) {
	a.mu.Lock()
	if a.conn == z {
		a.conn = nil
	}
	a.mu.Unlock()
	_ = z.c.Close()
}

// acceptPods takes enrolments: an AddWorkload with the pod's network namespace, answered with a
// WorkloadResponse's Ack once ztunnel has the pod (or with why not).
func (a *NodeAgent) acceptPods(ctx context.Context, l *net.UnixListener, wg *sync.WaitGroup) {
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				a.log.Error("node agent: accept pod", "err", err)
			}
			return
		}
		wg.Go(func() {
			defer uc.Close()
			defer context.AfterFunc(ctx, func() { _ = uc.Close() })()
			err := a.enrol(ctx, uc)
			ack := &zdspb.Ack{}
			if err != nil {
				ack.Error = err.Error()
				a.log.Warn("node agent: pod not enrolled", "err", err)
			}
			// A WorkloadResponse, as ztunnel answers: never an empty packet, which reads as the end.
			b, _ := proto.Marshal(&zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: ack}})
			_, _, _ = uc.WriteMsgUnix(b, nil, nil)
		})
	}
}

func (a *NodeAgent) enrol(ctx context.Context, uc *net.UnixConn) error {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	_ = uc.SetReadDeadline(time.Now().Add(a.AckTimeout))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return fmt.Errorf("read enrolment: %w", err)
	}
	fd, err := oneFD(oob[:oobn])
	if err != nil {
		return err
	}
	netns := os.NewFile(uintptr(fd), "netns")
	add := &zdspb.AddWorkload{}
	if err := proto.Unmarshal(buf[:n], add); err != nil {
		_ = netns.Close()
		return fmt.Errorf("enrolment: %w", err)
	}
	if add.GetUid() == "" || add.GetWorkloadInfo().GetName() == "" || add.GetWorkloadInfo().GetNamespace() == "" {
		_ = netns.Close()
		return errors.New("enrolment: uid, workload_info.name and workload_info.namespace are required")
	}
	if uid := add.GetUid(); strings.ContainsAny(uid, "/\x00") || strings.HasPrefix(uid, ".") {
		_ = netns.Close()
		return fmt.Errorf("enrolment: uid %q: not a pod's uid", uid) // it names the pod's record file
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = netns.Close()
		return fmt.Errorf("enrolment: stat the network namespace: %w", err)
	}
	w := &podNetns{add: add, netns: netns, inode: st.Ino, acked: make(chan error, 1)}
	a.mu.Lock()
	if old := a.workloads[add.GetUid()]; old != nil { // the init container ran again
		old.close()
	}
	a.workloads[add.GetUid()] = w
	z := a.conn
	a.mu.Unlock()
	if err := saveRecord(a.StateDir, w); err != nil {
		// The pod is meshed all the same; only an agent started again would not know it.
		a.log.Warn("node agent", "err", err)
	}
	a.log.Info("node agent: pod enrolled", "pod", add.GetWorkloadInfo().GetName(), "uid", add.GetUid())
	if z != nil {
		// The pod is sent again if ztunnel reconnects; a refusal is the pod's answer (w.acked).
		if err := a.sendOrDrop(z, func() error { return z.sendAdd(w) }); err != nil {
			a.log.Warn("node agent: add to ztunnel", "pod", add.GetWorkloadInfo().GetName(), "err", err)
		}
	}
	select {
	case err := <-w.acked:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * a.AckTimeout):
		return errors.New("ztunnel did not take the pod (is the node proxy running on this node?)")
	}
}

func oneFD(oob []byte) (int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("enrolment: want the network namespace as one file descriptor (%d messages, %v)", len(msgs), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return -1, fmt.Errorf("enrolment: want one file descriptor (%d, %v)", len(fds), err)
	}
	return fds[0], nil
}

// watchGone removes, every interval, the pods whose network namespace no process is in any more.
func (a *NodeAgent) watchGone(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live, err := processInNetns()
		if err != nil {
			a.log.Warn("node agent: list the node's network namespaces", "err", err)
			continue
		}
		a.mu.Lock()
		var gone []*podNetns
		for uid, w := range a.workloads {
			if _, ok := live[w.inode]; !ok {
				gone = append(gone, w)
				delete(a.workloads, uid)
			}
		}
		z := a.conn
		a.mu.Unlock()
		for _, w := range gone {
			a.log.Info("node agent: pod gone", "pod", w.add.GetWorkloadInfo().GetName(), "uid", w.add.GetUid())
			if z != nil {
				del := &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Del{Del: &zdspb.DelWorkload{Uid: w.add.GetUid()}}}
				if err := a.sendOrDrop(z, func() error { return z.send(del, nil) }); err != nil {
					a.log.Warn("node agent: remove from ztunnel", "pod", w.add.GetWorkloadInfo().GetName(), "err", err)
				}
			}
			w.close()
			if err := dropRecord(a.StateDir, w.add.GetUid()); err != nil {
				a.log.Warn("node agent", "err", err)
			}
		}
	}
}

// processInNetns returns, for every network namespace (inode) some process on the node is in, one such process.
func processInNetns() (map[uint64]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list the node's processes: %w", err)
	}
	live := map[uint64]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil {
			live[st.Ino] = pid
		}
	}
	return live, nil
}

// Pods are the uids of the pods the agent holds.
func (a *NodeAgent) Pods() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.workloads))
	for uid := range a.workloads {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}

// zdsConn is ztunnel's connection; mu serialises each message with its acknowledgement.
type zdsConn struct {
	mu      sync.Mutex
	c       *net.UnixConn
	timeout time.Duration // for each message's acknowledgement
}

func (z *zdsConn) sendAdd(w *podNetns) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil // replaced or gone meanwhile: nothing to add
	}
	err := z.send(&zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Add{Add: w.add}}, w.netns)
	w.mu.Unlock()
	if err == nil || !isTransport(err) {
		w.done(err) // ztunnel's answer, yes or no
	}
	return err
}

// ackError is ztunnel's refusal of a message.
type ackError struct{ msg string }

func (e ackError) Error() string { return "ztunnel: " + e.msg }

func isTransport(err error) bool {
	var ae ackError
	return !errors.As(err, &ae)
}

// send writes one request (with fd, if any) and waits for its acknowledgement. Callers hold z.mu.
func (z *zdsConn) send(req *zdspb.WorkloadRequest, fd *os.File) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var oob []byte
	if fd != nil {
		oob = unix.UnixRights(int(fd.Fd()))
	}
	_ = z.c.SetWriteDeadline(time.Now().Add(z.timeout))
	if _, _, err := z.c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("zds send: %w", err)
	}
	resp := &zdspb.WorkloadResponse{}
	if err := z.read(resp); err != nil {
		return err
	}
	if e := resp.GetAck().GetError(); e != "" {
		return ackError{msg: e}
	}
	return nil
}

func (z *zdsConn) read(m proto.Message) error {
	buf := make([]byte, 1024)
	_ = z.c.SetReadDeadline(time.Now().Add(z.timeout))
	n, _, _, _, err := z.c.ReadMsgUnix(buf, nil)
	if err != nil {
		return fmt.Errorf("zds read: %w", err)
	}
	if n == 0 {
		return errors.New("zds read: ztunnel closed the connection")
	}
	if err := proto.Unmarshal(buf[:n], m); err != nil {
		return fmt.Errorf("zds read: %w", err)
	}
	return nil
}
