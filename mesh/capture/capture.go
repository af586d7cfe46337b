// Package capture programs a pod's network namespace so that a sidecar proxy sees all of its TCP traffic, as
// Linkerd's init container does: connections arriving for the pod go to the proxy's inbound port, and
// connections the pod's processes open go to its outbound port, except the proxy's own (by uid, or by packet
// mark for a node proxy such as ambient's ztunnel, as istio-cni does) and those to the pod itself (loopback). The proxy reads where each connection was going from conntrack (SO_ORIGINAL_DST).
// The rules are nftables (google/nftables speaks netlink, so the init container needs no iptables binary), in
// one inet table of their own, replaced whole each time.
package capture

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Table is the nftables table (family inet) the rules live in.
const Table = "irs_capture"

// markMask is the part of the packet mark a proxy mark is matched on.
const markMask = 0xfff

// Redirect is what to capture and where to.
type Redirect struct {
	// ProxyUID is the proxy's user: its own connections leave the pod as they are.
	ProxyUID uint32
	// ProxyMark, instead of ProxyUID, marks the proxy's own connections (the low 12 bits of the packet mark,
	// as istio-cni matches ztunnel's): a node proxy works in the pod's namespace as no user of the pod.
	ProxyMark uint32
	// InboundPort receives every TCP connection to the pod, except to SkipInbound ports.
	InboundPort uint16
	// OutboundPort receives every TCP connection the pod opens, except to SkipOutbound ports.
	OutboundPort uint16
	// SkipInbound are ports reached directly (the proxy's own admin and inbound ports, for probes).
	SkipInbound []uint16
	// SkipOutbound are destination ports left alone.
	SkipOutbound []uint16
}

// Validate names what is wrong with r.
func (r Redirect) Validate() error {
	var errs []error
	if r.InboundPort == 0 {
		errs = append(errs, errors.New("inbound port: required"))
	}
	if r.OutboundPort == 0 {
		errs = append(errs, errors.New("outbound port: required"))
	}
	switch {
	case r.ProxyUID != 0 && r.ProxyMark != 0:
		errs = append(errs, errors.New("proxy uid and proxy mark: give one"))
	case r.ProxyMark > markMask:
		errs = append(errs, fmt.Errorf("proxy mark: %#x is more than 12 bits", r.ProxyMark))
	case r.ProxyUID == 0 && r.ProxyMark == 0:
		// Root's own connections would bypass the proxy, and the proxy as root would be captured by nothing.
		errs = append(errs, errors.New("proxy uid: must not be 0 (root); or give a proxy mark"))
	}
	return errors.Join(errs...)
}

// Apply replaces the capture rules of the calling thread's network namespace with r's.
func Apply(r Redirect) error {
	if err := r.Validate(); err != nil {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: Table}
	// Replace, not add to: an init container that is run again must leave one set of rules.
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	out := c.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})

	if r.ProxyMark != 0 {
		c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: append(markIs(r.ProxyMark), ret())})
	}
	for _, p := range r.SkipInbound {
		c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: append(tcpPort(p), ret())})
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: append(tcp(), redirectTo(r.InboundPort)...)})

	if r.ProxyMark != 0 {
		c.AddRule(&nftables.Rule{Table: table, Chain: out, Exprs: append(markIs(r.ProxyMark), ret())})
	} else {
		c.AddRule(&nftables.Rule{Table: table, Chain: out, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(r.ProxyUID)},
			ret(),
		}})
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: out, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")},
		ret(),
	}})
	for _, p := range r.SkipOutbound {
		c.AddRule(&nftables.Rule{Table: table, Chain: out, Exprs: append(tcpPort(p), ret())})
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: out, Exprs: append(tcp(), redirectTo(r.OutboundPort)...)})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: program table %s: %w (needs CAP_NET_ADMIN in the pod's network namespace)", Table, err)
	}
	return nil
}

func tcp() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

func tcpPort(port uint16) []expr.Any {
	return append(tcp(),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)})
}

// markIs matches packets whose mark's low 12 bits are mark.
func markIs(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(markMask), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
	}
}

func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func ret() expr.Any { return &expr.Verdict{Kind: expr.VerdictReturn} }

// ifname is an interface name as the kernel compares it: IFNAMSIZ bytes, NUL padded.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}
