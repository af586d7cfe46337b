package server

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/irs-sim/irs/worker/upstream"
)

// h2Handler adapts net/http (serving h2c) to serve, and hands gRPC requests to the gRPC server.
type h2Handler struct {
	s    *Server
	grpc http.Handler
}

func (h h2Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		h.grpc.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	req := getRequest()
	defer putRequest(req)
	req.requestID = []byte(r.Header.Get(upstream.HeaderRequestID))
	req.traceParent = []byte(r.Header.Get(upstream.HeaderTraceParent))
	req.hops = []byte(r.Header.Get(upstream.HeaderHops))
	if r.URL.RawQuery != "" {
		q := r.URL.Query()
		req.qDelay, req.qStatus, req.qSize = []byte(q.Get("delay")), []byte(q.Get("status")), []byte(q.Get("size"))
	}
	res := h.s.serve(r.Context(), req, h.s.http2, start)
	if res.Canceled {
		return
	}
	hd := w.Header()
	hd.Set(upstream.HeaderServerTiming, string(upstream.AppendServerTiming(nil, res.ServiceTime)))
	hd.Set(upstream.HeaderWorker, string(res.Worker))
	hd.Set(upstream.HeaderRequestID, string(res.RequestID))
	hd.Set(upstream.HeaderHops, string(res.Hops))
	if res.Message != "" {
		w.WriteHeader(res.Status.HTTP)
		_, _ = io.WriteString(w, res.Message+"\n")
		return
	}
	hd.Set("content-length", strconv.Itoa(res.Size))
	w.WriteHeader(res.Status.HTTP)
	_, _ = w.Write(upstream.Body(res.Size))
}
