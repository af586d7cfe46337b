// Package hrtimer sleeps with the kernel's high-resolution timer precision (tens of microseconds), where Go's
// timers wake about a millisecond late on the machines IRS runs on (the runtime's poller waits in whole
// milliseconds). A Timer is a timerfd read through Go's network poller, so the sleeping goroutine holds no
// processor and no thread. Used by the load generator's precise pacing and the test cluster's delay line.
package hrtimer

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Timer sleeps until a time. One goroutine sleeps on a Timer at a time.
type Timer struct {
	fd int
	f  *os.File
	// ref and monoRef are the same instant, by Go's monotonic clock and by CLOCK_MONOTONIC: a deadline is
	// placed on the kernel's clock by its monotonic distance from ref, so that a step of the wall clock (NTP)
	// moves no deadline.
	ref     time.Time
	monoRef int64
	buf     [8]byte
}

// New returns a Timer; Close releases it.
func New() (*Timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	t := &Timer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.f.Close()
		return nil, err
	}
	t.ref, t.monoRef = time.Now(), ts.Nano()
	return t, nil
}

// SleepUntil blocks until at; it returns false when interrupted (Interrupt), at once and on every later call.
func (t *Timer) SleepUntil(at time.Time) bool {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(t.monoRef + int64(at.Sub(t.ref)))}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &its, nil); err != nil {
		return false
	}
	if _, err := t.f.Read(t.buf[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
			return false
		}
		// Not expected of a timerfd that is ours alone; still, never wake early.
		time.Sleep(time.Until(at))
	}
	return true
}

// Interrupt ends the current and every later SleepUntil. Safe from another goroutine.
func (t *Timer) Interrupt() { _ = t.f.SetReadDeadline(time.Unix(1, 0)) }

// Close releases the timer.
func (t *Timer) Close() { _ = t.f.Close() }
