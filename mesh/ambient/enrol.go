package ambient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// DialWait is how long Enrol waits for the node agent's socket.
const DialWait = time.Minute

// Enrol hands the node agent listening on socket the calling thread's network namespace as the pod add names,
// and returns once the node proxy has made the pod's listeners (or with why it did not). A pod's init container
// calls it after programming the pod's capture, so the workers start with ztunnel in place.
func Enrol(ctx context.Context, socket string, add *zdspb.AddWorkload) error {
	netns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return fmt.Errorf("enrol: %w", err)
	}
	defer netns.Close()
	// The node agent may be starting beside its ztunnel: it gets DialWait to be there.
	var d net.Dialer
	var c net.Conn
	for give := time.Now().Add(DialWait); ; {
		if c, err = d.DialContext(ctx, "unixpacket", socket); err == nil {
			break
		}
		if time.Now().After(give) {
			return fmt.Errorf("enrol: the node agent (%s): %w (does the node run IRS's ztunnel?)", socket, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("enrol: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	} else {
		_ = uc.SetDeadline(time.Now().Add(3 * ackTimeout))
	}
	b, err := proto.Marshal(add)
	if err != nil {
		return err
	}
	if _, _, err := uc.WriteMsgUnix(b, unix.UnixRights(int(netns.Fd())), nil); err != nil {
		return fmt.Errorf("enrol: send: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, _, _, err := uc.ReadMsgUnix(buf, nil)
	if err != nil {
		return fmt.Errorf("enrol: the node agent's answer: %w", err)
	}
	resp := &zdspb.WorkloadResponse{}
	if err := proto.Unmarshal(buf[:n], resp); err != nil || resp.GetAck() == nil {
		return fmt.Errorf("enrol: the node agent's answer is not an acknowledgement (%v)", err)
	}
	if e := resp.GetAck().GetError(); e != "" {
		return errors.New("enrol: " + e)
	}
	return nil
}
