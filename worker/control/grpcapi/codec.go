package grpcapi

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// codec is grpc-go's proto codec, except that a request it cannot decode is refused as INVALID_ARGUMENT: the
// caller sent bytes that are no message. grpc-go turns any error of a codec into INTERNAL (it formats the error
// into a new status, so no code survives), and the generated handlers decode a request before any interceptor
// runs. So Unmarshal records the failure against the (reset) message and reports success, and the interceptors
// of ServerOptions, which see every request, take the failure and refuse the call.
type codec struct {
	encoding.CodecV2
	failed sync.Map // request message (a pointer) → its decoding error, until an interceptor takes it
}

var _ encoding.CodecV2 = (*codec)(nil)

func newCodec() *codec {
	return &codec{CodecV2: encoding.GetCodecV2(protocodec.Name)}
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err // not a request of ours: leave it to grpc-go
	}
	proto.Reset(m) // what was decoded before the error must not be used
	c.failed.Store(v, err)
	return nil
}

// take returns the INVALID_ARGUMENT error for a request that could not be decoded, and forgets it (nil for a
// request that was decoded).
func (c *codec) take(req any) error {
	err, ok := c.failed.LoadAndDelete(req)
	if !ok {
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "cannot decode the request as a message: %v", err)
}

// decodedStream refuses, on receipt, a streamed request the codec could not decode.
type decodedStream struct {
	grpc.ServerStream
	codec *codec
}

func (s decodedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.codec.take(m)
}
