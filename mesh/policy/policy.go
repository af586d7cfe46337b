// Package policy resolves and checks a workflow's mesh section (irs.v1.Mesh): its defaults, which are the
// defaults of the meshes it imitates (Istio's, for Envoy sidecars), and which services get sidecars. It knows
// nothing of Envoy or xDS, so the workflow validator can use it.
package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Mesh types.
const (
	TypeNone  = "none"
	TypeEnvoy = "envoy"
	// The meshes a Kubernetes cluster may have installed: the run enrols its pods in them (see Installed).
	TypeIstio   = "istio"
	TypeLinkerd = "linkerd"
	TypeAmbient = "ambient"
)

// Sidecar placements.
const (
	SidecarsBoth       = "both"
	SidecarsServerOnly = "server-only"
	SidecarsClientOnly = "client-only"
)

// Types and Placements are the accepted values, in the order reports list them.
var (
	Types      = []string{TypeNone, TypeEnvoy, TypeIstio, TypeLinkerd, TypeAmbient}
	Placements = []string{SidecarsBoth, SidecarsServerOnly, SidecarsClientOnly}
)

// retryConditions are Envoy's HTTP and gRPC retry conditions (x-envoy-retry-on and x-envoy-retry-grpc-on).
var retryConditions = []string{"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure",
	"envoy-ratelimited", "retriable-4xx", "refused-stream", "retriable-status-codes", "retriable-headers",
	"http3-post-connect-failure", "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// Defaults, Istio's where it has one.
const (
	DefaultConcurrency        = 2
	DefaultTrustDomain        = "irs.local"
	defaultConsecutive5xx     = 5
	defaultOutlierInterval    = "1s"
	defaultBaseEjectionTime   = "30s"
	defaultMaxEjectionPercent = "100%"
)

// istioRetryOn is Istio's default retry policy (2 attempts).
var istioRetryOn = []string{"connect-failure", "refused-stream", "unavailable", "cancelled", "retriable-status-codes"}

// Enabled reports whether the workflow's policy (placement, retries, timeouts, mTLS, outlier detection) is what
// the mesh runs: under IRS's Envoy sidecars, which apply it. Other meshes run their own policy (Installed), or
// the defaults of IRS's control plane for their proxies.
func Enabled(m *irsv1.Mesh) bool { return m.GetType() == TypeEnvoy }

// Installed reports whether m is a mesh installed on the cluster (Istio, Linkerd, ambient), which the run only
// enrols its pods in: its policy is the mesh's own, not the workflow's.
func Installed(m *irsv1.Mesh) bool {
	switch m.GetType() {
	case TypeIstio, TypeLinkerd, TypeAmbient:
		return true
	}
	return false
}

// Resolve returns m with every default filled in (nil: no mesh).
func Resolve(m *irsv1.Mesh) *irsv1.Mesh {
	out := proto.Clone(m).(*irsv1.Mesh)
	if out == nil {
		out = &irsv1.Mesh{}
	}
	if out.Type == "" {
		out.Type = TypeNone
	}
	if out.Sidecars == "" {
		out.Sidecars = SidecarsBoth
	}
	if out.Mtls == nil {
		out.Mtls = proto.Bool(true)
	}
	if out.Protocol == "" {
		out.Protocol = "http1"
	}
	if out.Concurrency == 0 {
		out.Concurrency = DefaultConcurrency
	}
	if out.Retries == nil {
		out.Retries = &irsv1.MeshRetries{}
	}
	if out.Retries.Attempts == nil {
		out.Retries.Attempts = proto.Uint32(2)
	}
	if len(out.Retries.RetryOn) == 0 {
		out.Retries.RetryOn = slices.Clone(istioRetryOn)
	}
	if len(out.Retries.RetriableStatusCodes) == 0 {
		out.Retries.RetriableStatusCodes = []uint32{503}
	}
	if od := out.OutlierDetection; od != nil {
		if od.Consecutive_5Xx == 0 {
			od.Consecutive_5Xx = defaultConsecutive5xx
		}
		if od.Interval == "" {
			od.Interval = defaultOutlierInterval
		}
		if od.BaseEjectionTime == "" {
			od.BaseEjectionTime = defaultBaseEjectionTime
		}
		if od.MaxEjectionPercent == "" {
			od.MaxEjectionPercent = defaultMaxEjectionPercent
		}
	}
	return out
}

// Validate checks a mesh section; paths are relative to it.
func Validate(m *irsv1.Mesh) field.List {
	var errs field.List
	if m == nil {
		return nil
	}
	if m.GetType() != "" && !slices.Contains(Types, m.GetType()) {
		errs.Addf("type", "unknown mesh %q (want %s)", m.GetType(), strings.Join(Types, " or "))
	}
	if Installed(m) {
		// The installed mesh's own policy applies (its retries, timeouts, mTLS): fields that set IRS's would
		// silently mean nothing.
		var set []string
		m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			if fd.Name() != "type" {
				set = append(set, string(fd.Name()))
			}
			return true
		})
		if len(set) > 0 {
			errs.Addf("type", "mesh %s is the cluster's own, with its own policy: %s apply to type envoy only",
				m.GetType(), strings.Join(set, ", "))
		}
	}
	if m.GetSidecars() != "" && !slices.Contains(Placements, m.GetSidecars()) {
		errs.Addf("sidecars", "unknown placement %q (want %s)", m.GetSidecars(), strings.Join(Placements, ", "))
	}
	switch m.GetProtocol() {
	case "", "http1", "http2":
	default:
		errs.Addf("protocol", "unknown protocol %q (want http1 or http2)", m.GetProtocol())
	}
	if m.GetConcurrency() > 64 {
		errs.Addf("concurrency", "%d threads per sidecar is more than 64", m.GetConcurrency())
	}
	duration := func(path, s string) {
		if _, err := units.ParseDuration(s); err != nil {
			errs.Add(path, err)
		}
	}
	duration("timeout", m.GetTimeout())
	if r := m.GetRetries(); r != nil {
		for i, c := range r.GetRetryOn() {
			if !slices.Contains(retryConditions, c) {
				errs.Addf(field.Index("retries.retry_on", i), "unknown retry condition %q (want one of %s)", c,
					strings.Join(retryConditions, ", "))
			}
		}
		duration("retries.per_try_timeout", r.GetPerTryTimeout())
		for i, c := range r.GetRetriableStatusCodes() {
			if c < 100 || c > 599 {
				errs.Addf(field.Index("retries.retriable_status_codes", i), "%d is not an HTTP status", c)
			}
		}
	}
	if od := m.GetOutlierDetection(); od != nil {
		duration("outlier_detection.interval", od.GetInterval())
		duration("outlier_detection.base_ejection_time", od.GetBaseEjectionTime())
		if od.GetMaxEjectionPercent() != "" {
			if _, err := units.ParsePercent(od.GetMaxEjectionPercent()); err != nil {
				errs.Add("outlier_detection.max_ejection_percent", err)
			}
		}
	}
	// The policy of a mesh of type none is kept, not an error: `--mesh none,envoy` compares both with one file.
	return errs
}

// HasSidecar reports whether a service gets sidecars under placement: serves says whether it serves (anything
// but a pure load generator).
func HasSidecar(placement string, serves bool) bool {
	switch placement {
	case SidecarsServerOnly:
		return serves
	case SidecarsClientOnly:
		return !serves
	}
	return true
}

// Describe names a variant of a mesh for reports: "none", "envoy", "envoy/server-only".
func Describe(m *irsv1.Mesh) string {
	m = Resolve(m)
	if Installed(m) {
		return m.GetType()
	}
	if !Enabled(m) {
		return TypeNone
	}
	if m.GetSidecars() == SidecarsBoth {
		return m.GetType()
	}
	return fmt.Sprintf("%s/%s", m.GetType(), m.GetSidecars())
}
