package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/upstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// simService adapts gRPC (irs.v1.SimService) to serve.
type simService struct {
	irsv1.UnimplementedSimServiceServer
	s *Server
}

func firstMD(md metadata.MD, key string) []byte {
	if v := md.Get(key); len(v) > 0 {
		return []byte(v[0])
	}
	return nil
}

// Call implements irsv1.SimServiceServer.
func (g *simService) Call(ctx context.Context, in *irsv1.CallRequest) (*irsv1.CallResponse, error) {
	start := time.Now()
	req := getRequest()
	defer putRequest(req)
	md, _ := metadata.FromIncomingContext(ctx)
	req.requestID = firstMD(md, upstream.HeaderRequestID)
	req.traceParent = firstMD(md, upstream.HeaderTraceParent)
	req.hops = firstMD(md, upstream.HeaderHops)
	req.qDelay, req.qStatus, req.qSize = []byte(in.GetDelay()), []byte(in.GetStatus()), []byte(in.GetSize())

	res := g.s.serve(ctx, req, g.s.grpc, start)
	if res.Canceled {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, status.Error(codes.DeadlineExceeded, "deadline exceeded")
		}
		return nil, status.Error(codes.Canceled, "caller went away")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(
		upstream.HeaderHops, string(res.Hops), upstream.HeaderRequestID, string(res.RequestID)))
	_ = grpc.SetTrailer(ctx, metadata.Pairs(
		upstream.TrailerServiceTime, strconv.FormatInt(res.ServiceTime.Microseconds(), 10),
		upstream.HeaderWorker, string(res.Worker)))
	if res.Message != "" && res.Status.HTTP == 400 {
		return nil, status.Error(codes.InvalidArgument, res.Message)
	}
	if res.Message != "" && res.Status.GRPC != 0 {
		return nil, status.Error(codes.Code(res.Status.GRPC), "irs: "+string(res.Worker)+": "+res.Message)
	}
	if res.Status.GRPC != 0 {
		return nil, status.Errorf(codes.Code(res.Status.GRPC), "irs: %s answered %d", res.Worker, res.Status.HTTP)
	}
	return &irsv1.CallResponse{Payload: upstream.Body(res.Size), Worker: string(res.Worker)}, nil
}
