package worker

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/loadgen"
	"github.com/irs-sim/irs/worker/upstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Defaults and limits of a worker configuration.
const (
	DefaultName        = "worker"
	DefaultTimeout     = 10 * time.Second
	DefaultConnections = 16
	DefaultLateAfter   = time.Millisecond
	DefaultHTTP1Pool   = 64
	maxBodySize        = 64 << 20
	maxPool            = 10_000
	maxRetries         = 100
	maxCPU             = 10 * time.Second
	// maxInFlightBytes bounds a load's request bodies in flight at once (connections × request_size): each side
	// may hold them all, and 10,000 connections of 64 MiB bodies drove a receiving worker to 8.3 GB.
	maxInFlightBytes = 1 << 30
)

// Spec is a compiled, valid worker configuration.
type Spec struct {
	Name   string
	Seed   uint64 // 0: pick one at start
	Listen string // "": no data plane
	Serve  behavior.Config
	Calls  []upstream.CallConfig
	Load   *LoadSpec
	Tags   map[string]string
	// source is the document the spec was compiled from.
	source *irsv1.WorkerConfig
}

// Source returns the document the spec was compiled from.
func (s *Spec) Source() *irsv1.WorkerConfig { return s.source }

// LoadSpec is a compiled load configuration.
type LoadSpec struct {
	// Target is how requests are sent (service, endpoints, protocol, path, size, timeout, keep-alive).
	Target upstream.CallConfig
	Gen    loadgen.Config
}

// Compile validates a configuration document and converts it to typed form. The error lists every problem as
// a *field.Error (errors.Join), each naming its field.
func Compile(cfg *irsv1.WorkerConfig) (*Spec, error) {
	var errs field.List
	cfg = proto.Clone(cfg).(*irsv1.WorkerConfig) // the spec must not change when the caller's message does
	spec := &Spec{Name: cfg.GetName(), Seed: cfg.GetSeed(), Listen: cfg.GetListen(), source: cfg}
	checkText(cfg.ProtoReflect(), "", &errs)
	if spec.Name == "" {
		spec.Name = DefaultName
	} else if strings.ContainsAny(spec.Name, ", \t\r\n") {
		errs.Addf("name", "%q: a name may not contain commas or spaces (it is used in the hops header)", spec.Name)
	}
	if spec.Listen != "" {
		errs.Add("listen", checkAddr(spec.Listen))
	}
	spec.Serve = compileServe(cfg.GetServe(), &errs)
	for i, c := range cfg.GetCalls() {
		spec.Calls = append(spec.Calls, compileCall(c, field.Index("calls", i), true, &errs))
	}
	if l := cfg.GetLoad(); l != nil {
		spec.Load = compileLoad(l, &errs)
	}
	for k, v := range cfg.GetTags() {
		if k == "" || strings.ContainsAny(k, ":,| \t\n") || strings.ContainsAny(v, ",| \t\n") {
			errs.Addf(field.Key("tags", k), "tag %q: %q: names and values may not contain , | or spaces (names not :)", k, v)
		}
	}
	spec.Tags = cfg.GetTags()
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return spec, nil
}

func compileServe(s *irsv1.Serve, errs *field.List) behavior.Config {
	out := behavior.Config{QueryOverrides: true, MaxOverrideDelay: behavior.DefaultMaxOverrideDelay}
	if s == nil {
		return out
	}
	var err error
	out.Delay, err = behavior.ParseDelay(s.GetDelay())
	errs.Add("serve.delay", err)
	mix, keyErrs := behavior.ParseStatusMix(s.GetStatus())
	for k, e := range keyErrs {
		if k == "" {
			errs.Add("serve.status", e)
		} else {
			errs.Add(field.Key("serve.status", k), e)
		}
	}
	out.Status = mix
	out.Size = int(checkSize(s.GetSize(), "serve.size", errs))
	out.CPU = duration(s.GetCpu(), "serve.cpu", 0, errs)
	if out.CPU > maxCPU {
		errs.Addf("serve.cpu", "%v is more than %v per request", out.CPU, maxCPU)
	}
	if s.QueryOverrides != nil {
		out.QueryOverrides = s.GetQueryOverrides()
	}
	out.MaxOverrideDelay = duration(s.GetMaxOverrideDelay(), "serve.max_override_delay", behavior.DefaultMaxOverrideDelay, errs)
	return out
}

func compileCall(c *irsv1.Call, path string, groupAllowed bool, errs *field.List) upstream.CallConfig {
	if len(c.GetParallel()) > 0 {
		if !groupAllowed {
			// Its members are not compiled: each level down would add the same error with a longer path.
			errs.Addf(field.Join(path, "parallel"), "parallel groups cannot be nested")
			return upstream.CallConfig{}
		}
		if set := setFieldsBesides(c, "parallel"); len(set) > 0 {
			errs.Addf(path, "a parallel group only holds calls; move %s into its calls", strings.Join(set, ", "))
		}
		out := upstream.CallConfig{}
		for i, p := range c.GetParallel() {
			out.Parallel = append(out.Parallel, compileCall(p, field.Index(field.Join(path, "parallel"), i), false, errs))
		}
		return out
	}
	out := upstream.CallConfig{
		Service:      c.GetService(),
		Path:         c.GetPath(),
		Retries:      int(c.GetRetries()),
		IgnoreErrors: c.GetIgnoreErrors(),
		KeepAlive:    c.Keepalive == nil || c.GetKeepalive(),
	}
	target(c.GetService(), c.GetEndpoints(), c.GetProtocol(), c.GetPath(), path, "service", &out, errs)
	out.RequestSize = int(checkSize(c.GetRequestSize(), field.Join(path, "request_size"), errs))
	out.Timeout = duration(c.GetTimeout(), field.Join(path, "timeout"), DefaultTimeout, errs)
	if out.Timeout == 0 {
		errs.Addf(field.Join(path, "timeout"), "must be more than 0")
	}
	if out.Retries > maxRetries {
		errs.Addf(field.Join(path, "retries"), "%d is more than %d", out.Retries, maxRetries)
	}
	out.RetryOn = upstream.RetryAll
	if len(c.GetRetryOn()) > 0 {
		out.RetryOn = 0
		for i, r := range c.GetRetryOn() {
			on, err := parseRetryOn(r)
			errs.Add(field.Index(field.Join(path, "retry_on"), i), err)
			out.RetryOn |= on
		}
	}
	out.Backoff = duration(c.GetRetryBackoff(), field.Join(path, "retry_backoff"), 0, errs)
	out.Probability = 1
	if p := c.GetProbability(); p != "" {
		var err error
		out.Probability, err = behavior.ParsePercent(p)
		errs.Add(field.Join(path, "probability"), err)
	}
	out.PoolSize = int(c.GetPoolSize())
	if out.PoolSize > maxPool {
		errs.Addf(field.Join(path, "pool_size"), "%d is more than %d", out.PoolSize, maxPool)
	}
	if out.PoolSize == 0 {
		out.PoolSize = DefaultHTTP1Pool
		if out.Protocol != upstream.HTTP1 {
			out.PoolSize = 1
		}
	}
	return out
}

// target fills the addressing part of a call or load: service name, endpoints, protocol and path.
func target(service string, endpoints []string, protocol, reqPath, path, serviceField string, out *upstream.CallConfig, errs *field.List) {
	if service == "" {
		errs.Addf(field.Join(path, serviceField), "required: the name of the service to call")
	} else if strings.ContainsAny(service, ", \t\r\n/") {
		errs.Addf(field.Join(path, serviceField), "%q: a service name may not contain commas, slashes or spaces", service)
	}
	for i, ep := range endpoints {
		errs.Add(field.Index(field.Join(path, "endpoints"), i), checkAddr(ep))
	}
	out.Endpoints = endpoints
	var err error
	out.Protocol, err = upstream.ParseProtocol(protocol)
	errs.Add(field.Join(path, "protocol"), err)
	if reqPath != "" && !strings.HasPrefix(reqPath, "/") {
		errs.Addf(field.Join(path, "path"), "%q must start with /", reqPath)
	}
}

func compileLoad(l *irsv1.Load, errs *field.List) *LoadSpec {
	out := &LoadSpec{Target: upstream.CallConfig{
		Service:     l.GetTarget(),
		Path:        l.GetPath(),
		KeepAlive:   l.Keepalive == nil || l.GetKeepalive(),
		Probability: 1,
	}}
	target(l.GetTarget(), l.GetEndpoints(), l.GetProtocol(), l.GetPath(), "load", "target", &out.Target, errs)
	out.Target.RequestSize = int(checkSize(l.GetRequestSize(), "load.request_size", errs))
	out.Target.Timeout = duration(l.GetTimeout(), "load.timeout", DefaultTimeout, errs)
	if out.Target.Timeout == 0 {
		errs.Addf("load.timeout", "must be more than 0")
	}
	g := &out.Gen
	g.Connections = int(l.GetConnections())
	if g.Connections == 0 {
		g.Connections = DefaultConnections
	} else if g.Connections > maxPool {
		errs.Addf("load.connections", "%d is more than %d", g.Connections, maxPool)
	}
	if size := int64(out.Target.RequestSize); size > 0 && int64(g.Connections)*size > maxInFlightBytes {
		errs.Addf("load.request_size", "%d connections of %d-byte requests may hold %d MiB in flight at once, over %d MiB: "+
			"fewer connections or smaller requests", g.Connections, size, int64(g.Connections)*size>>20, maxInFlightBytes>>20)
	}
	out.Target.PoolSize = g.Connections
	if out.Target.Protocol != upstream.HTTP1 {
		out.Target.PoolSize = 1 // h2 and gRPC multiplex the in-flight requests over one connection
	}
	g.Duration = duration(l.GetDuration(), "load.duration", 0, errs)
	g.LateAfter = duration(l.GetLateAfter(), "load.late_after", DefaultLateAfter, errs)
	switch strings.ToLower(l.GetArrivals()) {
	case "", "uniform":
	case "poisson":
		g.Poisson = true
	default:
		errs.Addf("load.arrivals", "unknown arrivals %q (want uniform or poisson)", l.GetArrivals())
	}
	switch strings.ToLower(l.GetPacing()) {
	case "", "precise":
	case "coarse":
		g.Coarse = true
	default:
		errs.Addf("load.pacing", "unknown pacing %q (want precise or coarse)", l.GetPacing())
	}
	switch strings.ToLower(l.GetMode()) {
	case "", "open":
		g.Schedule = compileSchedule(l, errs)
	case "closed":
		g.Closed = true
		if shapes(l) > 0 {
			errs.Addf("load.mode", "a closed loop has no rate: remove rate, ramp, steps and spike, or use mode open")
		}
		if l.GetArrivals() != "" {
			errs.Addf("load.arrivals", "arrivals apply to mode open only (a closed loop sends when a response arrives)")
		}
	default:
		errs.Addf("load.mode", "unknown mode %q (want open or closed)", l.GetMode())
	}
	return out
}

func shapes(l *irsv1.Load) int {
	n := 0
	for _, set := range []bool{l.GetRate() != 0, l.GetRamp() != nil, len(l.GetSteps()) > 0, l.GetSpike() != nil} {
		if set {
			n++
		}
	}
	return n
}

func compileSchedule(l *irsv1.Load, errs *field.List) loadgen.Schedule {
	switch shapes(l) {
	case 0:
		errs.Addf("load", "set the arrival rate: one of rate, ramp, steps or spike (or mode: closed for maximum throughput)")
		return loadgen.Schedule{}
	case 1:
	default:
		errs.Addf("load", "set only one of rate, ramp, steps and spike")
		return loadgen.Schedule{}
	}
	rate := func(v float64, path string) float64 {
		errs.Add(path, units.CheckRate(v))
		return v
	}
	var s loadgen.Schedule
	var err error
	switch {
	case l.GetRate() != 0:
		s, err = loadgen.Constant(rate(l.GetRate(), "load.rate"))
	case l.GetRamp() != nil:
		r := l.GetRamp()
		if r.GetOver() == "" {
			errs.Addf("load.ramp.over", "required: how long the ramp takes")
		}
		s, err = loadgen.Ramp(rate(r.GetFrom(), "load.ramp.from"), rate(r.GetTo(), "load.ramp.to"),
			duration(r.GetOver(), "load.ramp.over", 0, errs))
	case len(l.GetSteps()) > 0:
		var steps []loadgen.Step
		for i, st := range l.GetSteps() {
			p := field.Index("load.steps", i)
			if st.GetFor() == "" && i < len(l.GetSteps())-1 {
				errs.Addf(field.Join(p, "for"), "required on every step but the last (which holds)")
			}
			steps = append(steps, loadgen.Step{Rate: rate(st.GetRate(), field.Join(p, "rate")),
				For: duration(st.GetFor(), field.Join(p, "for"), 0, errs)})
		}
		s, err = loadgen.Steps(steps...)
	default:
		p := l.GetSpike()
		s, err = loadgen.Spike{
			Base: rate(p.GetBase(), "load.spike.base"), Peak: rate(p.GetPeak(), "load.spike.peak"),
			After: duration(p.GetAfter(), "load.spike.after", 0, errs), Rise: duration(p.GetRise(), "load.spike.rise", 0, errs),
			Hold: duration(p.GetHold(), "load.spike.hold", 0, errs), Fall: duration(p.GetFall(), "load.spike.fall", 0, errs),
		}.Schedule()
	}
	if err != nil && len(*errs) == 0 {
		errs.Add("load", err) // only reachable if a value slipped past the checks above
	}
	return s
}

// setFieldsBesides lists the fields set in m other than the named one.
func setFieldsBesides(m proto.Message, except protoreflect.Name) []string {
	var set []string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.Name() != except {
			set = append(set, string(fd.Name()))
		}
		return true
	})
	return set
}

// duration parses an optional duration field; def applies when it is empty or invalid (the error is listed).
func duration(s, path string, def time.Duration, errs *field.List) time.Duration {
	if strings.TrimSpace(s) == "" {
		return def
	}
	d, err := behavior.ParseDuration(s)
	if err == nil && d > MaxDuration {
		err = fmt.Errorf("%v is longer than a run may last (%v)", d, MaxDuration)
	}
	if err != nil {
		errs.Add(path, err)
		return def
	}
	return d
}

// MaxDuration is the longest any duration of a worker's configuration may be: as long as a run may last. A
// load shape's durations were not bounded, and a ramp of 2,562,047 h scaled by a workflow's time scale wrapped
// into a negative duration, which the dry run printed and the load's start refused mid-run.
const MaxDuration = 7 * 24 * time.Hour

func checkSize(n int64, path string, errs *field.List) int64 {
	if n < 0 || n > maxBodySize {
		errs.Addf(path, "%d bytes is outside 0-%d", n, maxBodySize)
		return 0
	}
	return n
}

// checkAddr checks a host:port address: an IP address or a DNS name, and a port.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid address %q (want host:port)", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("invalid port in %q", addr)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil // all interfaces, or an IP address
	}
	if len(host) > 253 {
		return fmt.Errorf("invalid host in %q: too long", addr)
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("invalid host %q in %q (want an IP address or a DNS name)", host, addr)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return fmt.Errorf("invalid host %q in %q (want an IP address or a DNS name)", host, addr)
			}
		}
	}
	return nil
}

// checkText rejects control characters in every string of a document (names, tags, paths): they mean nothing
// there, and some cannot be carried in YAML, so a configuration holding them could not be read back.
func checkText(m protoreflect.Message, path string, errs *field.List) {
	bad := func(s string) bool {
		for _, r := range s {
			if unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF || r == utf8.RuneError {
				return true
			}
		}
		return false
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fpath := field.Join(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				kpath := field.Key(fpath, k.String())
				if bad(k.String()) {
					errs.Addf(fpath, "a key contains a control character")
				}
				if fd.MapValue().Kind() == protoreflect.StringKind && bad(mv.String()) {
					errs.Addf(kpath, "contains a control character")
				} else if fd.MapValue().Message() != nil {
					checkText(mv.Message(), kpath, errs)
				}
				return true
			})
		case fd.IsList():
			for i := range v.List().Len() {
				e := v.List().Get(i)
				if fd.Kind() == protoreflect.StringKind && bad(e.String()) {
					errs.Addf(field.Index(fpath, i), "contains a control character")
				} else if fd.Message() != nil {
					checkText(e.Message(), field.Index(fpath, i), errs)
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			if bad(v.String()) {
				errs.Addf(fpath, "contains a control character")
			}
		case fd.Message() != nil:
			checkText(v.Message(), fpath, errs)
		}
		return true
	})
}

func parseRetryOn(s string) (upstream.RetryOn, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "5xx":
		return upstream.Retry5xx, nil
	case "timeout":
		return upstream.RetryTimeout, nil
	case "connect", "refused":
		return upstream.RetryConnect, nil
	case "reset":
		return upstream.RetryReset, nil
	case "all":
		return upstream.RetryAll, nil
	}
	return 0, fmt.Errorf("unknown retry condition %q (want 5xx, timeout, connect, reset or all)", s)
}
