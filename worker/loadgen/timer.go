package loadgen

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// preciseTimer sleeps until an instant with the kernel's high-resolution timer precision (tens of
// microseconds), where Go's timers can wake about a millisecond late on the machines IRS runs on. It is a
// timerfd read through Go's network poller, so the sleeping goroutine holds no processor and no thread.
type preciseTimer struct {
	fd int
	f  *os.File
	// offset converts a time.Time to CLOCK_MONOTONIC: mono = offset + t.UnixNano().
	offset int64
	buf    [8]byte
}

func newPreciseTimer() (*preciseTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	t := &preciseTimer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.f.Close()
		return nil, err
	}
	t.offset = ts.Nano() - time.Now().UnixNano()
	return t, nil
}

// errInterrupted is returned by sleepUntil when interrupt was called.
var errInterrupted = errors.New("sleep interrupted")

// sleepUntil blocks until at, or until interrupt is called.
func (t *preciseTimer) sleepUntil(at time.Time) error {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(t.offset + at.UnixNano())}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &its, nil); err != nil {
		return err
	}
	if _, err := t.f.Read(t.buf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errInterrupted
		}
		return err
	}
	return nil
}

// interrupt makes a pending and every later sleepUntil return errInterrupted. Safe from another goroutine.
func (t *preciseTimer) interrupt() { _ = t.f.SetReadDeadline(time.Unix(1, 0)) }

func (t *preciseTimer) close() { _ = t.f.Close() }
