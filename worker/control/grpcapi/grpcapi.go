// Package grpcapi is the gRPC adapter of the worker's control service (irs.v1.WorkerControlService): it
// translates messages to control.Service calls and its errors to gRPC statuses.
package grpcapi

import (
	"context"
	"errors"
	"google.golang.org/protobuf/proto"
	"time"

	"github.com/irs-sim/irs/internal/field"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/control"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// StatsWindowOpen is the header key StreamStats sends as soon as its window exists, before the first snapshot:
// a client that reads the stream's header knows from then on every request the worker counts is in the stream.
const StatsWindowOpen = "irs-stats-window-open"

// Register registers the control service on s. Add Interceptors to the server for the token check.
func Register(s *grpc.Server, svc *control.Service) {
	irsv1.RegisterWorkerControlServiceServer(s, &server{svc: svc})
}

// ServerOptions returns the server options of the control API: a codec that refuses undecodable requests as
// INVALID_ARGUMENT (see codec), and the interceptors that require the control token on every call, checked
// first, so that a caller without it learns nothing else.
func ServerOptions(svc *control.Service) []grpc.ServerOption {
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		auth := ""
		if v := md.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
		if !svc.Authorized(auth) {
			return status.Error(codes.Unauthenticated, "missing or wrong bearer token")
		}
		return nil
	}
	c := newCodec()
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(c),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			undecodable := c.take(req) // taken whatever happens next, or the codec would keep it
			if err := check(ctx); err != nil {
				return nil, err
			}
			if undecodable != nil {
				return nil, undecodable
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, decodedStream{ServerStream: ss, codec: c})
		}),
	}
}

type server struct {
	irsv1.UnimplementedWorkerControlServiceServer
	svc *control.Service
}

func (s *server) GetConfig(context.Context, *irsv1.GetConfigRequest) (*irsv1.GetConfigResponse, error) {
	return &irsv1.GetConfigResponse{State: s.svc.Config()}, nil
}

func (s *server) ReplaceConfig(_ context.Context, req *irsv1.ReplaceConfigRequest) (*irsv1.ReplaceConfigResponse, error) {
	if req.GetConfig() == nil {
		return nil, invalidArgument("config", "required")
	}
	if proto.Size(req.GetConfig()) == 0 {
		// Every field its default: a worker that serves, calls and loads nothing. As a PUT of null, it is never
		// what was meant (it stops the data plane).
		return nil, invalidArgument("config", control.EmptyConfig)
	}
	st, err := s.svc.Replace(req.GetConfig())
	if err != nil {
		return nil, toStatus(err)
	}
	return &irsv1.ReplaceConfigResponse{State: st}, nil
}

func (s *server) UpdateConfig(_ context.Context, req *irsv1.UpdateConfigRequest) (*irsv1.UpdateConfigResponse, error) {
	var st *irsv1.ConfigState
	var err error
	switch {
	case req.GetMergePatch() != "" && req.GetUpdateMask() != nil:
		return nil, invalidArgument("merge_patch", "set merge_patch or update_mask, not both")
	case req.GetMergePatch() != "" && req.GetConfig() != nil:
		return nil, invalidArgument("config", "config goes with update_mask, not with merge_patch")
	case req.GetMergePatch() != "":
		st, err = s.svc.MergePatch([]byte(req.GetMergePatch()))
	case req.GetUpdateMask() != nil:
		st, err = s.svc.UpdateMask(req.GetConfig(), req.GetUpdateMask())
	default:
		return nil, invalidArgument("merge_patch", "set merge_patch, or config with update_mask")
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &irsv1.UpdateConfigResponse{State: st}, nil
}

func (s *server) GetStats(_ context.Context, req *irsv1.GetStatsRequest) (*irsv1.GetStatsResponse, error) {
	return &irsv1.GetStatsResponse{Stats: s.svc.Stats(req.GetResetWindow())}, nil
}

func (s *server) StreamStats(req *irsv1.StreamStatsRequest, stream grpc.ServerStreamingServer[irsv1.StreamStatsResponse]) error {
	interval := time.Second
	if req.GetInterval() != "" {
		d, err := behavior.ParseDuration(req.GetInterval())
		if err != nil {
			return invalidArgument("interval", err.Error())
		}
		interval = d
	}
	var align time.Time
	if req.GetAlign() != nil {
		if err := req.GetAlign().CheckValid(); err != nil {
			return invalidArgument("align", err.Error())
		}
		align = req.GetAlign().AsTime()
	}
	// The header says the window is open: a collector waits for it before its run's clock starts.
	opened := func() error { return stream.SendHeader(metadata.Pairs(StatsWindowOpen, "1")) }
	err := s.svc.StreamStats(stream.Context(), interval, req.GetCumulative(), align, opened, func(snap *irsv1.StatsSnapshot) error {
		return stream.Send(&irsv1.StreamStatsResponse{Stats: snap})
	})
	return toStatus(err)
}

func (s *server) StartLoad(_ context.Context, req *irsv1.StartLoadRequest) (*irsv1.StartLoadResponse, error) {
	st, err := s.svc.StartLoad(req.GetLoad())
	if err != nil {
		return nil, toStatus(err)
	}
	return &irsv1.StartLoadResponse{State: st}, nil
}

func (s *server) StopLoad(context.Context, *irsv1.StopLoadRequest) (*irsv1.StopLoadResponse, error) {
	st, err := s.svc.StopLoad()
	if err != nil {
		return nil, toStatus(err)
	}
	return &irsv1.StopLoadResponse{State: st}, nil
}

func (s *server) GetInfo(context.Context, *irsv1.GetInfoRequest) (*irsv1.GetInfoResponse, error) {
	return &irsv1.GetInfoResponse{Info: s.svc.Info()}, nil
}

func invalidArgument(path, msg string) error {
	return toStatus(&control.InvalidError{Fields: field.List{field.Errorf(path, "%s", msg)}})
}

// toStatus maps control errors to gRPC statuses: an invalid change is INVALID_ARGUMENT with a
// google.rpc.BadRequest listing every field.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var inv *control.InvalidError
	if !errors.As(err, &inv) {
		return status.Error(codes.Internal, err.Error())
	}
	st := status.New(codes.InvalidArgument, inv.Error())
	br := &errdetails.BadRequest{}
	// The details are capped, so that the status stays within what a client reads (the message says how many).
	const maxViolations = 100
	for _, f := range inv.Fields[:min(len(inv.Fields), maxViolations)] {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: f.Path, Description: f.Error(),
		})
	}
	if withDetails, err := st.WithDetails(br); err == nil {
		st = withDetails
	}
	return st.Err()
}
