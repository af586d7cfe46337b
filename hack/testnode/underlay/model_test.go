package main

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

func testNodes() []node {
	var out []node
	for i, name := range []string{"irs-node-1", "irs-node-2", "irs-node-3"} {
		out = append(out, node{name: name, ip: netip.AddrFrom4([4]byte{10, 99, 0, byte(11 + i)}),
			pods: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(1 + i), 0}), 24), link: "ul-" + string(rune('1'+i))})
	}
	return out
}

func TestCompileRefusesBadStatesNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *irsv1.UnderlayState
		want string
	}{
		{"unknown node", &irsv1.UnderlayState{Nodes: []*irsv1.UnderlayNode{{Name: "irs-node-9", Down: true}}}, `nodes[0].name: no node "irs-node-9"`},
		{"bad delay", &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Delay: "fast"}}, "default_link.delay"},
		{"negative jitter", &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Jitter: "-1ms"}}, "default_link.jitter"},
		{"delay too long", &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Delay: "1m"}}, "default_link: delay and jitter at most"},
		{"loss over 100", &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Loss: "120%"}}, "default_link.loss"},
		{"rate unit", &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Rate: "fast"}}, "default_link.rate: invalid bandwidth"},
		{"rate too low", &irsv1.UnderlayState{DefaultLink: &irsv1.Link{Rate: "10k"}}, "outside 1M-1000G"},
		{"pair to unknown", &irsv1.UnderlayState{Pairs: []*irsv1.PairLink{{From: "irs-node-1", To: "x"}}}, `pairs[0].to: no node "x"`},
		{"pair to itself", &irsv1.UnderlayState{Pairs: []*irsv1.PairLink{{From: "irs-node-1", To: "irs-node-1"}}}, "pairs[0]: from and to are the same node"},
		{"pair link", &irsv1.UnderlayState{Pairs: []*irsv1.PairLink{{From: "irs-node-1", To: "irs-node-2", Link: &irsv1.Link{Loss: "x"}}}}, "pairs[0].link.loss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compile(tc.st, testNodes())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCompileResolvesPairsOverTheDefault(t *testing.T) {
	m, err := compile(&irsv1.UnderlayState{
		Nodes:       []*irsv1.UnderlayNode{{Name: "irs-node-3", Down: true}},
		DefaultLink: &irsv1.Link{Delay: "300us"},
		Pairs: []*irsv1.PairLink{
			{From: "irs-node-1", To: "irs-node-2", Link: &irsv1.Link{Loss: "100%"}},
			{From: "irs-node-1", To: "irs-node-2", Link: &irsv1.Link{Delay: "1ms", Rate: "100M"}}, // the later wins
		},
	}, testNodes())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.links[0][1]; got != (link{delay: time.Millisecond, rate: 100e6}) {
		t.Errorf("1→2 = %+v", got)
	}
	if got := m.links[1][0]; got != (link{delay: 300 * time.Microsecond}) {
		t.Errorf("2→1 = %+v, want the default (a pair is one direction)", got)
	}
	if !m.shaped || !m.down[2] || m.down[0] {
		t.Errorf("shaped %v down %v", m.shaped, m.down)
	}
	if m.nodeOf(netip.MustParseAddr("10.244.2.7")) != 1 || m.nodeOf(netip.MustParseAddr("10.99.0.12")) != -1 {
		t.Error("nodeOf finds a node by its pods' CIDR only")
	}
	plain, err := compile(&irsv1.UnderlayState{}, testNodes())
	if err != nil || plain.shaped {
		t.Fatalf("an empty state is a plain network: %v %v", err, plain.shaped)
	}
}

func TestDecideKeepsOrderAndBandwidth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1000, 0)
	l := link{delay: time.Millisecond, jitter: 900 * time.Microsecond}
	var p pair
	var last time.Time
	for i := range 2000 {
		at := now.Add(time.Duration(i) * 10 * time.Microsecond)
		due, drop := l.decide(&p, at, 1500, rng)
		if drop {
			t.Fatal("no loss was asked for")
		}
		if due.Before(last) {
			t.Fatalf("packet %d overtook the one before it", i)
		}
		if d := due.Sub(at); d < 100*time.Microsecond-time.Nanosecond && !due.Equal(last) {
			t.Fatalf("packet %d delayed %s, below delay-jitter", i, d)
		}
		last = due
	}
	// 100 Mbit/s: a 1250-byte packet takes 100us on the wire, so ten sent at once leave 100us apart.
	bw := link{rate: 100e6}
	var q pair
	var dues []time.Time
	for range 10 {
		due, _ := bw.decide(&q, now, 1250, rng)
		dues = append(dues, due)
	}
	if got := dues[9].Sub(now); got != time.Millisecond {
		t.Errorf("the tenth packet leaves after %s, want 1ms", got)
	}
}

func TestDecideLosesTheShareAsked(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	l := link{loss: 0.2}
	var p pair
	lost := 0
	const n = 20000
	for range n {
		if _, drop := l.decide(&p, time.Unix(0, 0), 100, rng); drop {
			lost++
		}
	}
	// Binomial: sd = sqrt(n·0.2·0.8) ≈ 57; 5 sd either side.
	if lost < 4000-285 || lost > 4000+285 {
		t.Errorf("lost %d of %d at 20%%", lost, n)
	}
	all := link{loss: 1}
	if _, drop := all.decide(&p, time.Unix(0, 0), 100, rng); !drop {
		t.Error("100% loss sent a packet")
	}
}
