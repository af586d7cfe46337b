package worker

import (
	"context"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/loadgen"
	"github.com/irs-sim/irs/worker/upstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
)

// loadRun is a running load generator and the target it sends to. The target is swapped when only the
// endpoints change (a new endpoint list must not restart the schedule).
type loadRun struct {
	spec   *LoadSpec
	gen    *loadgen.Generator
	target atomic.Pointer[upstream.Target]
}

// LoadDone returns a channel closed when the current load generator has finished (nil when there is none).
func (w *Worker) LoadDone() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.load == nil {
		return nil
	}
	return w.load.gen.Done()
}

// applyLoad starts, replaces or stops the generator when the load configuration changed; when only the
// endpoints changed, the running generator sends to the new ones from now on.
func (w *Worker) applyLoad(old, spec *Spec) error {
	if old != nil && sameLoad(old, spec) {
		return nil
	}
	if old != nil && w.load != nil && sameLoadButEndpoints(old, spec) {
		target, err := w.pool.NewTarget(spec.Load.Target, nil)
		if err != nil {
			return err
		}
		prev := w.load.target.Swap(target)
		w.load.spec = spec.Load
		// Requests in flight may still be using prev, and a sender may have just picked it.
		time.AfterFunc(spec.Load.Target.Timeout+5*time.Second, prev.Release)
		return nil
	}
	w.stopLoad()
	if spec.Load == nil {
		return nil
	}
	return w.startLoad(spec)
}

func sameLoad(a, b *Spec) bool {
	if a.Load == nil || b.Load == nil {
		return a.Load == b.Load
	}
	return a.Name == b.Name && proto.Equal(a.source.GetLoad(), b.source.GetLoad())
}

func sameLoadButEndpoints(a, b *Spec) bool {
	if a.Load == nil || b.Load == nil || a.Name != b.Name {
		return false
	}
	x, y := proto.Clone(a.source.GetLoad()).(*irsv1.Load), proto.Clone(b.source.GetLoad()).(*irsv1.Load)
	x.Endpoints, y.Endpoints = nil, nil
	return proto.Equal(x, y)
}

func (w *Worker) startLoad(spec *Spec) error {
	ls := spec.Load
	target, err := w.pool.NewTarget(ls.Target, nil)
	if err != nil {
		return err
	}
	rec := w.reg.Load(ls.Target.Service)
	gen := ls.Gen
	gen.Seed = w.seed
	run := &loadRun{spec: ls}
	run.target.Store(target)
	// Requests are bounded by their timeout and drained when the load stops, so they need no cancellation (which
	// would cost every HTTP/1.1 request a goroutine).
	send := sender(context.WithoutCancel(w.ctx), &run.target, spec.Name, ls.Target.Timeout, w.tracer)
	run.gen = loadgen.Start(w.ctx, gen, send, rec)
	w.load = run
	w.logger.Info("load started", "target", ls.Target.Service, "endpoints", ls.Target.Endpoints)
	w.wg.Go(func() {
		<-run.gen.Done()
		run.target.Load().Release()
	})
	return nil
}

// stopLoad stops the generator: nothing new is sent; requests in flight finish in the background.
func (w *Worker) stopLoad() {
	if w.load == nil {
		return
	}
	gen := w.load.gen
	w.load = nil
	w.wg.Go(gen.Stop)
}

// loadRequest is the per-request state of a generated request, pooled.
type loadRequest struct {
	prop  upstream.Propagation
	id    [32]byte
	trace [48]byte
}

var loadRequests = sync.Pool{New: func() any { return new(loadRequest) }}

// sender returns the generator's SendFunc: one try to the next endpoint, as the first hop of a new request,
// within ctx (whatever context the generator passes).
func sender(ctx context.Context, target *atomic.Pointer[upstream.Target], name string, timeout time.Duration, tracer trace.Tracer) loadgen.SendFunc {
	hops := []byte(name)
	return func(_ context.Context, start time.Time) loadgen.Result {
		t := target.Load()
		r := loadRequests.Get().(*loadRequest)
		defer loadRequests.Put(r)
		r.prop = upstream.Propagation{RequestID: upstream.AppendRequestID(r.id[:0]), Hops: hops}
		if tracer == nil {
			return loadResult(t.Send(ctx, &r.prop, start.Add(timeout)))
		}
		_, span := tracer.Start(ctx, "irs.load", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("irs.target", t.Config().Service)))
		sc := span.SpanContext()
		tid, sid := sc.TraceID(), sc.SpanID()
		buf := hex.AppendEncode(hex.AppendEncode(r.trace[:0], tid[:]), sid[:])
		r.prop.TraceID, r.prop.SpanID, r.prop.Sampled = buf[:32], buf[32:48], sc.IsSampled()
		resp := t.Send(ctx, &r.prop, start.Add(timeout))
		span.SetAttributes(attribute.Int("http.response.status_code", resp.Status))
		if resp.Failed() {
			span.SetStatus(codes.Error, "")
		}
		span.End()
		return loadResult(resp)
	}
}

func loadResult(resp upstream.Response) loadgen.Result {
	return loadgen.Result{Status: resp.Status, Err: resp.Err, FromProxy: resp.Status != 0 && !resp.FromWorker,
		ServerTime: resp.ServerTime, HasServerTime: resp.HasServerTime, ProxyFlags: resp.ProxyFlags, ProxyError: resp.ProxyError}
}
