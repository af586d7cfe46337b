package server

import (
	"context"
	"errors"
	"net"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/soheilhy/cmux"

	"golang.org/x/sys/unix"
)

// pollGone is how often a long delay checks whether an HTTP/1.1 caller has disconnected.
const pollGone = 20 * time.Millisecond

// wait sleeps for d. It returns false if the caller went away first: ctx ended (HTTP/2, gRPC, shutdown) or,
// when conn is set (HTTP/1.1, whose context cannot tell), the peer closed the connection; so that a cancelled
// request frees its handler.
func wait(ctx context.Context, d time.Duration, conn net.Conn) bool {
	if d <= 0 {
		return true
	}
	end := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		step := time.Until(end)
		if step <= 0 {
			return true
		}
		if conn != nil && step > pollGone {
			step = pollGone
		}
		t.Reset(step)
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
		if conn != nil && time.Now().Before(end) && peerGone(conn) {
			return false
		}
	}
}

// burn spends d of CPU time on this request. It measures the thread's CPU clock rather than wall time, so the
// cost is real even when the machine is busy and the thread is descheduled. The goroutine is locked to its
// thread so that the clock it reads is its own.
func burn(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	x := uint64(d) | 1
	for {
		x = spin(x)
		if threadCPU()-start >= d {
			return x != 0 // always true; using x keeps the work from being optimised away
		}
		if ctx.Err() != nil {
			return false
		}
	}
}

// spin is about 25 µs of arithmetic between clock reads.
//
//go:noinline
func spin(x uint64) uint64 {
	for range 16384 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// threadCPU reads the calling thread's CPU clock. It is a raw system call: it never blocks, and the scheduler's
// syscall hooks would wake the runtime's monitor thread on every read.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_, _, _ = unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_THREAD_CPUTIME_ID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// peerGone reports whether the peer of a connection has closed it, without consuming any data: a pipelined
// next request stays in the socket for the server to read.
func peerGone(c net.Conn) bool {
	if dc, ok := c.(*deadlineConn); ok {
		c = dc.Conn
	}
	if mc, ok := c.(*cmux.MuxConn); ok {
		c = mc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	// Control, not Read: a peek that never waits needs no poller, and must work past the read deadline.
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || (err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR))
	})
	return gone
}
