package capture

import (
	"encoding/binary"
	"fmt"
	"github.com/google/nftables"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Two network namespaces made for the test, joined by a veth pair: "pod" (10.201.0.1, with the capture rules)
// and "peer" (10.201.0.2), as a pod and another pod on its node.
func TestRedirect(t *testing.T) {
	pod, peer := netnsPair(t, "u")
	var apply error
	inNetns(t, pod, func() {
		apply = Apply(Redirect{ProxyUID: 2102, InboundPort: 4143, OutboundPort: 4140, SkipInbound: []uint16{4191},
			SkipOutbound: []uint16{9443}})
	})
	if apply != nil {
		t.Fatal(apply)
	}
	var inbound, outbound, admin, app, loop, peerApp, peerTLS net.Listener
	inNetns(t, pod, func() {
		inbound, outbound = listen(t, "0.0.0.0:4143"), listen(t, "0.0.0.0:4140")
		admin, app, loop = listen(t, "0.0.0.0:4191"), listen(t, "0.0.0.0:8080"), listen(t, "127.0.0.1:8081")
	})
	inNetns(t, peer, func() { peerApp, peerTLS = listen(t, "10.201.0.2:9090"), listen(t, "10.201.0.2:9443") })

	// Another pod calls the app: the inbound proxy gets it, and the address it was for.
	inNetns(t, peer, func() { dial(t, "10.201.0.1:8080") })
	expectArrival(t, inbound, "10.201.0.1:8080", "inbound")
	// The proxy's admin port is reached directly (the kubelet's probes).
	inNetns(t, peer, func() { dial(t, "10.201.0.1:4191") })
	expectArrival(t, admin, "", "admin")

	// The app calls another pod: the outbound proxy gets it.
	inNetns(t, pod, func() { dial(t, "10.201.0.2:9090") })
	expectArrival(t, outbound, "10.201.0.2:9090", "outbound")
	// A skipped outbound port, and the pod's own loopback, go where they were sent.
	inNetns(t, pod, func() { dial(t, "10.201.0.2:9443") })
	expectArrival(t, peerTLS, "", "skipped outbound port")
	inNetns(t, pod, func() { dial(t, "127.0.0.1:8081") })
	expectArrival(t, loop, "", "loopback")

	// The proxy's own connections leave the pod as they are.
	self := copyForUID(t)
	inNetns(t, pod, func() {
		cmd := exec.Command(self, "-test.run=^TestHelperDial$")
		cmd.Env = append(os.Environ(), "IRS_CAPTURE_DIAL=10.201.0.2:9090")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 2102, Gid: 2102}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("dial as the proxy's uid: %v\n%s", err, out)
		}
	})
	expectArrival(t, peerApp, "", "the proxy's own connection")
	_ = app

	// Applying again replaces the rules rather than adding a second set.
	inNetns(t, pod, func() {
		if err := Apply(Redirect{ProxyUID: 2102, InboundPort: 4143, OutboundPort: 4140}); err != nil {
			t.Error(err)
		}
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		table := &nftables.Table{Family: nftables.TableFamilyINet, Name: Table}
		rules, err := c.GetRules(table, &nftables.Chain{Name: "output", Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) != 3 { // uid, loopback, redirect
			t.Errorf("after a second Apply, %d rules in output, want 3", len(rules))
		}
	})
}

// A node proxy (ztunnel) is told apart by its packet mark, as istio-cni does, and its tunnel port is reached
// directly.
func TestRedirectByMark(t *testing.T) {
	pod, peer := netnsPair(t, "m")
	var apply error
	inNetns(t, pod, func() {
		apply = Apply(Redirect{ProxyMark: 0x539, InboundPort: 15006, OutboundPort: 15001, SkipInbound: []uint16{15008}})
	})
	if apply != nil {
		t.Fatal(apply)
	}
	var inbound, outbound, tunnel, peerApp net.Listener
	inNetns(t, pod, func() {
		inbound, outbound, tunnel = listen(t, "0.0.0.0:15006"), listen(t, "0.0.0.0:15001"), listen(t, "0.0.0.0:15008")
	})
	inNetns(t, peer, func() { peerApp = listen(t, "10.201.0.2:9090") })

	inNetns(t, peer, func() { dial(t, "10.201.0.1:8080") })
	expectArrival(t, inbound, "10.201.0.1:8080", "inbound")
	inNetns(t, peer, func() { dial(t, "10.201.0.1:15008") })
	expectArrival(t, tunnel, "", "the tunnel port")
	inNetns(t, pod, func() { dial(t, "10.201.0.2:9090") })
	expectArrival(t, outbound, "10.201.0.2:9090", "outbound")
	// A connection with the proxy's mark (in its low 12 bits) leaves as it is.
	inNetns(t, pod, func() {
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, raw syscall.RawConn) error {
			var serr error
			err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, 0x7539) })
			if err != nil {
				return err
			}
			return serr
		}}
		c, err := d.Dial("tcp4", "10.201.0.2:9090")
		if err != nil {
			t.Errorf("dial with the mark: %v", err)
			return
		}
		_ = c.Close()
	})
	expectArrival(t, peerApp, "", "the proxy's own (marked) connection")
}

// copyForUID copies the test binary where another user may run it (go test builds it in a private directory).
func copyForUID(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "irs-capture-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := dir + "/capture.test"
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHelperDial is the proxy, in a process of the proxy's uid (run by TestRedirect).
func TestHelperDial(t *testing.T) {
	addr := os.Getenv("IRS_CAPTURE_DIAL")
	if addr == "" {
		t.Skip("helper process")
	}
	dial(t, addr)
}

func TestRedirectInvalid(t *testing.T) {
	err := Redirect{}.Validate()
	for _, want := range []string{"inbound port", "outbound port", "proxy uid"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate of nothing: %v, want %q named", err, want)
		}
	}
	both := Redirect{ProxyUID: 2102, ProxyMark: 0x539, InboundPort: 1, OutboundPort: 2}.Validate()
	if both == nil || !strings.Contains(both.Error(), "give one") {
		t.Errorf("Validate with a uid and a mark: %v, want the two named", both)
	}
	if err := (Redirect{ProxyMark: 0x1000, InboundPort: 1, OutboundPort: 2}).Validate(); err == nil || !strings.Contains(err.Error(), "12 bits") {
		t.Errorf("Validate with a 13-bit mark: %v", err)
	}
}

// netnsPair makes the two namespaces and removes them at the end.
func netnsPair(t *testing.T, tag string) (pod, peer string) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	pod, peer = fmt.Sprintf("irs-cap%s-pod-%d", tag, os.Getpid()), fmt.Sprintf("irs-cap%s-peer-%d", tag, os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", pod).Run()
		_ = exec.Command("ip", "netns", "del", peer).Run()
	})
	run("netns", "add", pod)
	run("netns", "add", peer)
	run("link", "add", "irscap"+tag+"0", "netns", pod, "type", "veth", "peer", "name", "irscap"+tag+"1", "netns", peer)
	for ns, cfg := range map[string][2]string{pod: {"irscap" + tag + "0", "10.201.0.1/24"}, peer: {"irscap" + tag + "1", "10.201.0.2/24"}} {
		run("-n", ns, "link", "set", "lo", "up")
		run("-n", ns, "addr", "add", cfg[1], "dev", cfg[0])
		run("-n", ns, "link", "set", cfg[0], "up")
	}
	return pod, peer
}

// inNetns runs fn on a thread in the named network namespace; the thread is thrown away afterwards. Sockets
// made in fn stay in that namespace.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/run/netns/" + name)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		t.Errorf("dial %s: %v", addr, err)
		return
	}
	_ = c.Close()
}

// expectArrival accepts one connection on l within 5 s and, for a captured one, checks the address it was for.
func expectArrival(t *testing.T, l net.Listener, originalDst, what string) {
	t.Helper()
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Errorf("%s: nothing arrived on %s: %v", what, l.Addr(), err)
		return
	}
	defer c.Close()
	if originalDst == "" {
		return
	}
	if got := origDst(t, c.(*net.TCPConn)); got != originalDst {
		t.Errorf("%s: original destination %s, want %s", what, got, originalDst)
	}
}

// origDst is where a redirected connection was going (SO_ORIGINAL_DST, as the proxy reads it).
func origDst(t *testing.T, c *net.TCPConn) string {
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var addr netip.AddrPort
	var serr error
	_ = raw.Control(func(fd uintptr) {
		// A sockaddr_in fits the 16 bytes GetsockoptIPv6Mreq reads.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		port := binary.BigEndian.Uint16(m.Multiaddr[2:4])
		addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Multiaddr[4:8])), port)
	})
	if serr != nil {
		t.Fatalf("SO_ORIGINAL_DST: %v", serr)
	}
	return addr.String()
}
