package loadgen

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper waits until a request is due.
type sleeper interface {
	// sleepUntil blocks until t; it returns false when interrupted.
	sleepUntil(t time.Time) bool
	// interrupt ends the current and every later sleepUntil. Safe from another goroutine.
	interrupt()
	close()
}

// CoarseTick is the grid coarse pacing sends on: every request due within one tick leaves at its end.
const CoarseTick = time.Millisecond

// newSleepers returns n sleepers; coarse ones wake on a CoarseTick grid that starts at start.
func newSleepers(n int, coarse bool, start time.Time) ([]sleeper, error) {
	out := make([]sleeper, 0, n)
	for range n {
		if coarse {
			out = append(out, newCoarseSleeper(start))
			continue
		}
		s, err := newPreciseSleeper()
		if err != nil {
			closeSleepers(out)
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func closeSleepers(ss []sleeper) {
	for _, s := range ss {
		s.close()
	}
}

// preciseSleeper sleeps with the kernel's high-resolution timer precision (tens of microseconds), where Go's
// timers wake about a millisecond late on the machines IRS runs on. It is a timerfd read through Go's network
// poller, so the sleeping goroutine holds no processor and no thread.
type preciseSleeper struct {
	fd int
	f  *os.File
	// offset converts a time.Time to CLOCK_MONOTONIC: mono = offset + t.UnixNano().
	offset int64
	buf    [8]byte
}

func newPreciseSleeper() (*preciseSleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	t := &preciseSleeper{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.f.Close()
		return nil, err
	}
	t.offset = ts.Nano() - time.Now().UnixNano()
	return t, nil
}

func (t *preciseSleeper) sleepUntil(at time.Time) bool {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(t.offset + at.UnixNano())}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &its, nil); err != nil {
		return false
	}
	if _, err := t.f.Read(t.buf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		// Not expected of a timerfd that is ours alone; still, never send early.
		time.Sleep(time.Until(at))
	}
	return true
}

func (t *preciseSleeper) interrupt() { _ = t.f.SetReadDeadline(time.Unix(1, 0)) }

func (t *preciseSleeper) close() { _ = t.f.Close() }

// coarseSleeper sleeps on a Go timer until the end of the grid tick that at falls in. Every sender whose
// request is due in the same tick wakes at the same instant, so a tick's requests leave as one burst and the
// target is woken once per tick rather than once per request. Without the grid, Go's timers (about a
// millisecond late) still fire early whenever a response wakes the runtime, which breaks bursts into pieces.
type coarseSleeper struct {
	start time.Time
	t     *time.Timer
	halt  chan struct{}
	once  chan struct{}
}

func newCoarseSleeper(start time.Time) *coarseSleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &coarseSleeper{start: start, t: t, halt: make(chan struct{}), once: make(chan struct{}, 1)}
}

// tickEnd is the end of the grid tick that at falls in (at itself when it is on the grid).
func (c *coarseSleeper) tickEnd(at time.Time) time.Time {
	since := at.Sub(c.start)
	ticks := (since + CoarseTick - 1) / CoarseTick
	return c.start.Add(ticks * CoarseTick)
}

func (c *coarseSleeper) sleepUntil(at time.Time) bool {
	c.t.Reset(time.Until(c.tickEnd(at)))
	select {
	case <-c.t.C:
		return true
	case <-c.halt:
		return false
	}
}

func (c *coarseSleeper) interrupt() {
	select {
	case c.once <- struct{}{}:
		close(c.halt)
	default:
	}
}

func (c *coarseSleeper) close() { c.t.Stop() }
