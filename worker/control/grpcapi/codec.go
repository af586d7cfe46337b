package grpcapi

import (
	"errors"
	"strings"
	"sync"

	"github.com/irs-sim/irs/internal/yamlpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// Unmarshal decodes a request within the limits a YAML or JSON document has (yamlpb's): its size, how deeply its
// messages nest, and how many values it holds. A ReplaceConfig of 5,000 nested parallel groups (15 KB) took
// the worker to 2.7 GB: protobuf's own recursion limit is 10,000, and every level cost an error with its path.
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v) // not a request of ours: leave it to grpc-go
	}
	err := decodeBounded(data, m)
	if err == nil {
		return nil
	}
	proto.Reset(m) // what was decoded before the error must not be used
	c.failed.Store(v, err)
	return nil
}

// decodeBounded decodes a request of at most yamlpb.MaxBytes, nesting at most yamlpb.MaxDepth messages and
// holding at most yamlpb.MaxNodes values.
func decodeBounded(data mem.BufferSlice, m proto.Message) error {
	if n := data.Len(); n > yamlpb.MaxBytes {
		return &yamlpb.LimitError{Doc: "request", Unit: "bytes", Found: int64(n), Limit: yamlpb.MaxBytes}
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if err := (proto.UnmarshalOptions{RecursionLimit: yamlpb.MaxDepth}).Unmarshal(buf.ReadOnlyData(), m); err != nil {
		if strings.Contains(err.Error(), "exceeded maximum recursion depth") {
			return &yamlpb.LimitError{Doc: "request", Unit: "levels", Found: -1, Limit: yamlpb.MaxDepth}
		}
		return err
	}
	if countValues(m.ProtoReflect(), yamlpb.MaxNodes+1) > yamlpb.MaxNodes {
		return &yamlpb.LimitError{Doc: "request", Unit: "nodes", Found: -1, Limit: yamlpb.MaxNodes}
	}
	return nil
}

// countValues counts the fields, list elements and map entries set in m, stopping past limit.
func countValues(m protoreflect.Message, limit int) int {
	n := 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && n <= limit; i++ {
				n++
				if fd.Message() != nil {
					n += countValues(l.Get(i).Message(), limit-n)
				}
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				n++
				if fd.MapValue().Message() != nil {
					n += countValues(mv.Message(), limit-n)
				}
				return n <= limit
			})
		case fd.Message() != nil:
			n += 1 + countValues(v.Message(), limit-n)
		default:
			n++
		}
		return n <= limit
	})
	return n
}

// take returns the INVALID_ARGUMENT error for a request that could not be decoded, and forgets it (nil for a
// request that was decoded).
func (c *codec) take(req any) error {
	err, ok := c.failed.LoadAndDelete(req)
	if !ok {
		return nil
	}
	var limit *yamlpb.LimitError
	if errors.As(err.(error), &limit) {
		return status.Error(codes.InvalidArgument, limit.Error())
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
