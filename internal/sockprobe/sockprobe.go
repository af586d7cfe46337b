// Package sockprobe looks under a TCP connection the way tests about Go's poller need to: it counts the read
// system calls a connection makes, failed ones too (net.Conn's Read hides a read that fails with EAGAIN and the
// wait after it), and waits until bytes sent on loopback are in the receiving socket's queue (loopback delivers
// them in a soft interrupt that a busy machine may defer past the sender's write).
package sockprobe

import (
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// ReadCounter reads through the connection's descriptor and counts read system calls in Reads.
type ReadCounter struct {
	*net.TCPConn
	Reads int
}

func (c *ReadCounter) Read(b []byte) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		c.Reads++
		n, rerr = unix.Read(int(fd), b)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WaitQueued returns once c's receive queue holds at least n bytes, or once read says they were read already,
// or with an error after bound. It spins without yielding, so that a goroutine holding the only processor
// usually keeps it; the runtime may still hand the processor to the reader meanwhile (preemption, or a
// system call it deems long), which read covers.
func WaitQueued(c *net.TCPConn, n int, read func() bool, bound time.Duration) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(bound); ; {
		var queued int
		var qerr error
		if err := rc.Control(func(fd uintptr) { queued, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
			return err
		}
		if qerr != nil {
			return fmt.Errorf("SIOCINQ: %w", qerr)
		}
		if queued >= n || read() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d bytes in the receive queue after %v", queued, n, bound)
		}
	}
}
