package control

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
)

func TestZZScratch(t *testing.T) {
	cfg := &irsv1.WorkerConfig{Name: "w", Listen: "127.0.0.1:0"}
	spec, err := worker.Compile(cfg)
	if err != nil { t.Fatal(err) }
	w := worker.New(spec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx, spec); err != nil { t.Fatal(err) }
	defer func() { cancel(); w.Wait() }()
	s := New(w, "x", "")
	for _, d := range []string{
		"calls: [{service: a, protocol: grpc, endpoints: ['%zz:80']}]",
		"calls: [{service: 'a%zz', protocol: grpc, endpoints: ['127.0.0.1:80']}]",
		"calls: [{service: 'a@b', protocol: grpc, endpoints: ['127.0.0.1:80']}]",
		"load: {target: a, rate: 1, protocol: grpc, endpoints: ['%zz:80']}",
	} {
		st, err := s.ReplaceDocument([]byte(d))
		fmt.Printf("%s => %v %T %v\n", d, st.GetVersion(), err, err)
		fmt.Println(s.Config().Version)
	}
}
