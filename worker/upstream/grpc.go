package upstream

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/stats"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcClient calls irs.v1.SimService on one endpoint over poolSize connections, round-robin.
type grpcClient struct {
	conns []*grpc.ClientConn
	stubs []irsv1.SimServiceClient
	next  atomic.Uint32
}

func newGRPCClient(addr, service string, poolSize int) (*grpcClient, error) {
	c := &grpcClient{}
	for range max(poolSize, 1) {
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithAuthority(service))
		if err != nil {
			c.close()
			return nil, err
		}
		c.conns = append(c.conns, cc)
		c.stubs = append(c.stubs, irsv1.NewSimServiceClient(cc))
	}
	return c, nil
}

func (c *grpcClient) do(ctx context.Context, deadline time.Time, r *Request, prop *Propagation) Response {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if p := prop; p != nil {
		var tp [55]byte
		ctx = metadata.AppendToOutgoingContext(ctx,
			HeaderTraceParent, string(AppendTraceParent(tp[:0], p)),
			HeaderRequestID, string(p.RequestID),
			HeaderHops, string(p.Hops))
	}
	var trailer metadata.MD
	stub := c.stubs[int(c.next.Add(1))%len(c.stubs)]
	_, err := stub.Call(ctx, &irsv1.CallRequest{Payload: Body(r.BodySize)}, grpc.Trailer(&trailer))
	out := Response{}
	if v := trailer.Get(TrailerServiceTime); len(v) == 1 {
		if us, perr := strconv.ParseInt(v[0], 10, 64); perr == nil {
			out.ServerTime, out.HasServerTime = time.Duration(us)*time.Microsecond, true
		}
	}
	out.FromWorker = len(trailer.Get(HeaderWorker)) > 0
	if err == nil {
		out.Status = 200
		return out
	}
	st := status.Convert(err)
	// A status the upstream worker produced comes with its trailers; anything else is the transport's.
	if out.FromWorker {
		out.Status = behavior.HTTPFromGRPC(uint32(st.Code()))
		return out
	}
	switch {
	// The deadline may pass a moment before ctx notices, and the server may report it first: the clock decides.
	case !time.Now().Before(deadline) && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled):
		out.Err = stats.ErrTimeout
	case ctx.Err() != nil:
		out.Err = Classify(ctx.Err())
	case len(trailer) > 0:
		// The peer answered with a status but did not name itself a worker: something on the way made it, such as
		// Envoy's local reply (UNAVAILABLE, as trailers only) for a dead upstream. grpc-go's own failures (refused,
		// reset, a deadline) come with no trailers at all.
		out.Status = behavior.HTTPFromGRPC(uint32(st.Code()))
	case st.Code() == codes.DeadlineExceeded:
		out.Err = stats.ErrTimeout
	case st.Code() == codes.Canceled:
		out.Err = stats.ErrCanceled
	default:
		out.Err, out.Cause = Classify(err), err
		if out.Err == stats.ErrOther && st.Code() == codes.Unavailable {
			out.Err = stats.ErrReset
		}
	}
	return out
}

func (c *grpcClient) close() {
	for _, cc := range c.conns {
		_ = cc.Close()
	}
}
