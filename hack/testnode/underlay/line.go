package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/irs-sim/irs/internal/hrtimer"
	"golang.org/x/sys/unix"
)

// line is the delay line: the kernel routes pod traffic between nodes into a TUN device; the line reads each
// packet, decides from the model whether to drop it or when to send it, and writes it back into the TUN, from
// where the kernel forwards it to its node. (This kernel has no netem, so the delay is kept in user space.)
type line struct {
	tun   *os.File
	model atomic.Pointer[model]
	log   *slog.Logger

	// queues: one per direction between two nodes, each with a sender that waits until a packet is due.
	queues map[[2]int]*queue
	wg     sync.WaitGroup

	forwarded, delayed, lost, overflowed, writeErrors atomic.Int64
}

type packet struct {
	b   []byte
	due time.Time
}

type queue struct {
	state pair   // read and written only by the reader
	model *model // the model state was built under: a new link starts from a free wire
	ch    chan packet
}

// queueDepth bounds the packets one direction holds: beyond it they are dropped, as a router's full buffer does.
const queueDepth = 8192

// openTUN attaches to the TUN device name (created by `ip tuntap add NAME mode tun`), without packet info;
// non-blocking, so that reads go through Go's poller and Close ends a read in progress.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("attach to TUN %s: %w", name, e)
	}
	return os.NewFile(uintptr(fd), name), nil
}

func newLine(tun *os.File, m *model, log *slog.Logger) *line {
	l := &line{tun: tun, log: log, queues: map[[2]int]*queue{}}
	l.model.Store(m)
	return l
}

// run reads packets until ctx ends or the TUN fails, then waits for the senders.
func (l *line) run(ctx context.Context, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for _, q := range l.queues {
			close(q.ch)
		}
		l.wg.Wait()
	}()
	go func() { <-ctx.Done(); l.tun.Close() }() // unblocks the read
	buf := make([]byte, 65536)
	for {
		n, err := l.tun.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read TUN: %w", err)
		}
		l.handle(ctx, buf[:n], rng)
	}
}

// handle decides one packet's fate. Only IPv4 packets between two nodes' pods are shaped; anything else passes.
func (l *line) handle(ctx context.Context, b []byte, rng *rand.Rand) {
	now := time.Now()
	m := l.model.Load()
	from, to := -1, -1
	if len(b) >= 20 && b[0]>>4 == 4 {
		src, dst := netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		if !m.exempt[src] && !m.exempt[dst] {
			from, to = m.nodeOf(src), m.nodeOf(dst)
		}
	}
	if from < 0 || to < 0 || from == to {
		l.write(b)
		return
	}
	if m.down[from] || m.down[to] {
		l.lost.Add(1)
		return
	}
	q := l.queue(ctx, from, to)
	if q.model != m {
		q.state, q.model = pair{}, m
	}
	// Decided on a copy, kept only once the packet is sent or queued: a packet dropped must not hold up the
	// ones after it.
	st := q.state
	due, drop := m.links[from][to].decide(&st, now, len(b), rng)
	if drop {
		l.lost.Add(1)
		return
	}
	if !due.After(now) && len(q.ch) == 0 {
		q.state = st
		l.write(b)
		return
	}
	select {
	case q.ch <- packet{b: append([]byte(nil), b...), due: due}:
		q.state = st
		l.delayed.Add(1)
	default:
		l.overflowed.Add(1)
	}
}

func (l *line) queue(ctx context.Context, from, to int) *queue {
	k := [2]int{from, to}
	if q, ok := l.queues[k]; ok {
		return q
	}
	q := &queue{ch: make(chan packet, queueDepth)}
	l.queues[k] = q
	l.wg.Go(func() { l.send(ctx, q.ch) })
	return q
}

// send writes a direction's packets in order, each when it is due, on a high-resolution timer: Go's timers wake
// about a millisecond late here, more than the delays a link between nodes has.
func (l *line) send(ctx context.Context, ch <-chan packet) {
	t, err := hrtimer.New()
	if err != nil {
		l.log.Error("no high-resolution timer: packets of this direction go undelayed", "err", err)
	}
	if t != nil {
		defer t.Close()
		stop := context.AfterFunc(ctx, t.Interrupt)
		defer stop()
	}
	for p := range ch {
		if t != nil && time.Until(p.due) > 0 && !t.SleepUntil(p.due) {
			continue // drain without sending: the line is stopping
		}
		l.write(p.b)
	}
}

func (l *line) write(b []byte) {
	if _, err := l.tun.Write(b); err != nil {
		if l.writeErrors.Add(1) == 1 {
			l.log.Warn("write to TUN", "err", err)
		}
		return
	}
	l.forwarded.Add(1)
}
