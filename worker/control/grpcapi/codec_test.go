package grpcapi_test

import (
	"io"
	"net"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/control/grpcapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends its bytes as they are, whatever message the call is given, and decodes replies as proto.
type rawCodec struct{ frame []byte }

func (c rawCodec) Marshal(any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(c.frame)}, nil
}
func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}
func (rawCodec) Name() string { return protocodec.Name }

var _ encoding.CodecV2 = rawCodec{}

// TestUndecodableRequest: a request that is not a valid message is the caller's error, INVALID_ARGUMENT, on
// unary and streaming methods alike, with or without a token, and the server goes on serving. grpc-go answers
// INTERNAL ("grpc: failed to unmarshal the received message") when its codec fails, which said the worker was
// at fault.
func TestUndecodableRequest(t *testing.T) {
	svc, _ := startService(t, token)
	gs := grpc.NewServer(grpcapi.ServerOptions(svc)...)
	grpcapi.Register(gs, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })

	frames := []struct {
		name  string
		frame []byte
	}{
		{name: "invalid wire type", frame: []byte{0x0f}},
		{name: "truncated field", frame: []byte{0x0a, 0x05, 'a'}},
		{name: "bad varint", frame: []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{name: "invalid UTF-8 in a string", frame: []byte{0x0a, 0x02, 0xff, 0xfe}}, // field 1 is a string in both
	}
	const svcName = "/irs.v1.WorkerControlService/"
	for _, f := range frames {
		for _, auth := range []string{"Bearer " + token, ""} {
			want := codes.InvalidArgument
			if auth == "" {
				want = codes.Unauthenticated // the token is checked first: a stranger learns nothing
			}
			t.Run(f.name+"/"+want.String(), func(t *testing.T) {
				opt := grpc.ForceCodecV2(rawCodec{frame: f.frame})
				err := cc.Invoke(callCtx(t, auth), svcName+"UpdateConfig", &irsv1.UpdateConfigRequest{},
					&irsv1.UpdateConfigResponse{}, opt)
				if got := status.Code(err); got != want {
					t.Errorf("UpdateConfig: %v, want %v", err, want)
				}
				stream, err := cc.NewStream(callCtx(t, auth), &grpc.StreamDesc{ServerStreams: true},
					svcName+"StreamStats", opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := stream.SendMsg(&irsv1.StreamStatsRequest{}); err != nil && err != io.EOF {
					t.Fatal(err)
				}
				if err := stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				err = stream.RecvMsg(&irsv1.StreamStatsResponse{})
				if got := status.Code(err); got != want {
					t.Errorf("StreamStats: %v, want %v", err, want)
				}
			})
		}
	}
	// The server still serves well-formed requests.
	if _, err := irsv1.NewWorkerControlServiceClient(cc).GetConfig(callCtx(t, "Bearer "+token),
		&irsv1.GetConfigRequest{}); err != nil {
		t.Errorf("GetConfig after undecodable requests: %v", err)
	}
}
