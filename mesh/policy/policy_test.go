package policy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// istioRetryOn is Istio's default retry_on, written out here so that the test does not trust the package's own.
var istioRetryOn = []string{"connect-failure", "refused-stream", "unavailable", "cancelled", "retriable-status-codes"}

// istioRetries is Istio's default retry policy: 2 attempts, the conditions above, 503 retriable.
func istioRetries() *irsv1.MeshRetries {
	return &irsv1.MeshRetries{Attempts: proto.Uint32(2), RetryOn: slices.Clone(istioRetryOn),
		RetriableStatusCodes: []uint32{503}}
}

// text prints a message on one line for failure messages.
func text(m proto.Message) string {
	return prototext.MarshalOptions{}.Format(m)
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name string
		in   *irsv1.Mesh
		want *irsv1.Mesh
	}{
		{
			name: "nil is no mesh with every default",
			in:   nil,
			want: &irsv1.Mesh{Type: "none", Sidecars: "both", Mtls: proto.Bool(true), Protocol: "http1",
				Concurrency: 2, Retries: istioRetries()},
		},
		{
			name: "empty section",
			in:   &irsv1.Mesh{},
			want: &irsv1.Mesh{Type: "none", Sidecars: "both", Mtls: proto.Bool(true), Protocol: "http1",
				Concurrency: 2, Retries: istioRetries()},
		},
		{
			name: "envoy alone gets Istio's defaults and nothing else",
			in:   &irsv1.Mesh{Type: "envoy"},
			want: &irsv1.Mesh{Type: "envoy", Sidecars: "both", Mtls: proto.Bool(true), Protocol: "http1",
				Concurrency: 2, Retries: istioRetries()},
		},
		{
			name: "mtls false is kept",
			in:   &irsv1.Mesh{Type: "envoy", Mtls: proto.Bool(false)},
			want: &irsv1.Mesh{Type: "envoy", Sidecars: "both", Mtls: proto.Bool(false), Protocol: "http1",
				Concurrency: 2, Retries: istioRetries()},
		},
		{
			name: "attempts 0 is kept: retries off",
			in:   &irsv1.Mesh{Type: "envoy", Retries: &irsv1.MeshRetries{Attempts: proto.Uint32(0)}},
			want: &irsv1.Mesh{Type: "envoy", Sidecars: "both", Mtls: proto.Bool(true), Protocol: "http1",
				Concurrency: 2, Retries: &irsv1.MeshRetries{Attempts: proto.Uint32(0),
					RetryOn: slices.Clone(istioRetryOn), RetriableStatusCodes: []uint32{503}}},
		},
		{
			name: "partial retries are completed",
			in: &irsv1.Mesh{Type: "envoy", Retries: &irsv1.MeshRetries{RetryOn: []string{"5xx"},
				PerTryTimeout: "250ms"}},
			want: &irsv1.Mesh{Type: "envoy", Sidecars: "both", Mtls: proto.Bool(true), Protocol: "http1",
				Concurrency: 2, Retries: &irsv1.MeshRetries{Attempts: proto.Uint32(2), RetryOn: []string{"5xx"},
					PerTryTimeout: "250ms", RetriableStatusCodes: []uint32{503}}},
		},
		{
			name: "empty outlier detection gets its defaults",
			in:   &irsv1.Mesh{Type: "envoy", OutlierDetection: &irsv1.OutlierDetection{}},
			want: &irsv1.Mesh{Type: "envoy", Sidecars: "both", Mtls: proto.Bool(true), Protocol: "http1",
				Concurrency: 2, Retries: istioRetries(), OutlierDetection: &irsv1.OutlierDetection{
					Consecutive_5Xx: 5, Interval: "1s", BaseEjectionTime: "30s", MaxEjectionPercent: "100%"}},
		},
		{
			name: "partial outlier detection is completed",
			in: &irsv1.Mesh{Type: "envoy", OutlierDetection: &irsv1.OutlierDetection{Consecutive_5Xx: 3,
				MaxEjectionPercent: "50%"}},
			want: &irsv1.Mesh{Type: "envoy", Sidecars: "both", Mtls: proto.Bool(true), Protocol: "http1",
				Concurrency: 2, Retries: istioRetries(), OutlierDetection: &irsv1.OutlierDetection{
					Consecutive_5Xx: 3, Interval: "1s", BaseEjectionTime: "30s", MaxEjectionPercent: "50%"}},
		},
		{
			name: "everything set is kept",
			in: &irsv1.Mesh{Type: "envoy", Sidecars: "server-only", Mtls: proto.Bool(false), Protocol: "http2",
				Concurrency: 8, Timeout: "3s",
				Retries: &irsv1.MeshRetries{Attempts: proto.Uint32(4), RetryOn: []string{"5xx", "reset"},
					PerTryTimeout: "1s", RetriableStatusCodes: []uint32{502, 504}},
				OutlierDetection: &irsv1.OutlierDetection{Consecutive_5Xx: 2, Interval: "5s",
					BaseEjectionTime: "1m", MaxEjectionPercent: "20%"},
				CircuitBreakers: &irsv1.CircuitBreakers{MaxConnections: 10, MaxRetries: 3}},
			want: &irsv1.Mesh{Type: "envoy", Sidecars: "server-only", Mtls: proto.Bool(false), Protocol: "http2",
				Concurrency: 8, Timeout: "3s",
				Retries: &irsv1.MeshRetries{Attempts: proto.Uint32(4), RetryOn: []string{"5xx", "reset"},
					PerTryTimeout: "1s", RetriableStatusCodes: []uint32{502, 504}},
				OutlierDetection: &irsv1.OutlierDetection{Consecutive_5Xx: 2, Interval: "5s",
					BaseEjectionTime: "1m", MaxEjectionPercent: "20%"},
				CircuitBreakers: &irsv1.CircuitBreakers{MaxConnections: 10, MaxRetries: 3}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.in)
			got := policy.Resolve(tt.in)
			if !proto.Equal(got, tt.want) {
				t.Errorf("Resolve(%s)\n got: %s\nwant: %s", text(tt.in), text(got), text(tt.want))
			}
			if !proto.Equal(tt.in, before) {
				t.Errorf("Resolve modified its input: got %s, want %s", text(tt.in), text(before))
			}
			if tt.in != nil && got == tt.in {
				t.Errorf("Resolve returned its input, want a copy")
			}
		})
	}
}

// TestResolveDoesNotShareLists checks that the result owns its lists: appending to a resolved policy's
// defaults must not change the next one's.
func TestResolveDoesNotShareLists(t *testing.T) {
	a := policy.Resolve(nil)
	a.Retries.RetryOn[0] = "5xx"
	a.Retries.RetriableStatusCodes[0] = 500
	b := policy.Resolve(nil)
	if got := b.GetRetries().GetRetryOn(); !slices.Equal(got, istioRetryOn) {
		t.Errorf("retry_on after changing an earlier result = %v, want %v", got, istioRetryOn)
	}
	if got := b.GetRetries().GetRetriableStatusCodes(); !slices.Equal(got, []uint32{503}) {
		t.Errorf("retriable_status_codes after changing an earlier result = %v, want [503]", got)
	}
}

// allRetryConditions are Envoy's HTTP and gRPC retry conditions (x-envoy-retry-on, x-envoy-retry-grpc-on).
var allRetryConditions = []string{"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure",
	"envoy-ratelimited", "retriable-4xx", "refused-stream", "retriable-status-codes", "retriable-headers",
	"http3-post-connect-failure", "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

func TestValidate(t *testing.T) {
	type wantErr struct {
		path string
		msg  string // part of the message
	}
	tests := []struct {
		name string
		mesh *irsv1.Mesh
		want []wantErr
	}{
		{name: "nil", mesh: nil},
		{name: "empty", mesh: &irsv1.Mesh{}},
		{name: "resolved defaults", mesh: policy.Resolve(&irsv1.Mesh{Type: "envoy",
			OutlierDetection: &irsv1.OutlierDetection{}})},
		{
			name: "every accepted value at its limit",
			mesh: &irsv1.Mesh{Type: "envoy", Sidecars: "client-only", Protocol: "http2", Concurrency: 64,
				Timeout: "0", Retries: &irsv1.MeshRetries{RetryOn: allRetryConditions, PerTryTimeout: "1.5s",
					RetriableStatusCodes: []uint32{100, 599}},
				OutlierDetection: &irsv1.OutlierDetection{Interval: "250us", BaseEjectionTime: "1m",
					MaxEjectionPercent: "0%"}},
		},
		{name: "type none with a policy", mesh: &irsv1.Mesh{Type: "none", Sidecars: "server-only",
			Timeout: "2s", Retries: &irsv1.MeshRetries{Attempts: proto.Uint32(3)}}},
		{name: "max ejection percent 100", mesh: &irsv1.Mesh{
			OutlierDetection: &irsv1.OutlierDetection{MaxEjectionPercent: "100%"}}},
		{name: "max ejection percent bare number", mesh: &irsv1.Mesh{
			OutlierDetection: &irsv1.OutlierDetection{MaxEjectionPercent: "30"}}},
		{name: "an installed mesh", mesh: &irsv1.Mesh{Type: "istio"}},
		{name: "an installed mesh with IRS's policy", mesh: &irsv1.Mesh{Type: "linkerd", Timeout: "1s", Mtls: proto.Bool(false)},
			want: []wantErr{{"type", "mtls, timeout apply to type envoy only"}}},
		{name: "unknown type", mesh: &irsv1.Mesh{Type: "consul"},
			want: []wantErr{{"type", `unknown mesh "consul"`}}},
		{name: "type is case sensitive", mesh: &irsv1.Mesh{Type: "Envoy"},
			want: []wantErr{{"type", `unknown mesh "Envoy"`}}},
		{name: "unknown placement", mesh: &irsv1.Mesh{Type: "envoy", Sidecars: "server"},
			want: []wantErr{{"sidecars", `unknown placement "server"`}}},
		{name: "unknown protocol", mesh: &irsv1.Mesh{Protocol: "grpc"},
			want: []wantErr{{"protocol", `unknown protocol "grpc"`}}},
		{name: "concurrency 65", mesh: &irsv1.Mesh{Concurrency: 65},
			want: []wantErr{{"concurrency", "65 threads per sidecar is more than 64"}}},
		{name: "timeout not a duration", mesh: &irsv1.Mesh{Timeout: "soon"},
			want: []wantErr{{"timeout", `invalid duration "soon"`}}},
		{name: "timeout without unit", mesh: &irsv1.Mesh{Timeout: "30"},
			want: []wantErr{{"timeout", `invalid duration "30"`}}},
		{name: "negative timeout", mesh: &irsv1.Mesh{Timeout: "-1s"},
			want: []wantErr{{"timeout", `negative duration "-1s"`}}},
		{name: "unknown retry conditions", mesh: &irsv1.Mesh{Retries: &irsv1.MeshRetries{
			RetryOn: []string{"5xx", "503", "reset", "connect_failure"}}},
			want: []wantErr{{"retries.retry_on[1]", `unknown retry condition "503"`},
				{"retries.retry_on[3]", `unknown retry condition "connect_failure"`}}},
		{name: "bad per-try timeout", mesh: &irsv1.Mesh{Retries: &irsv1.MeshRetries{PerTryTimeout: "1 sec"}},
			want: []wantErr{{"retries.per_try_timeout", `invalid duration "1 sec"`}}},
		{name: "bad status codes", mesh: &irsv1.Mesh{Retries: &irsv1.MeshRetries{
			RetriableStatusCodes: []uint32{503, 99, 600, 0}}},
			want: []wantErr{{"retries.retriable_status_codes[1]", "99 is not an HTTP status"},
				{"retries.retriable_status_codes[2]", "600 is not an HTTP status"},
				{"retries.retriable_status_codes[3]", "0 is not an HTTP status"}}},
		{name: "bad outlier interval", mesh: &irsv1.Mesh{OutlierDetection: &irsv1.OutlierDetection{Interval: "often"}},
			want: []wantErr{{"outlier_detection.interval", `invalid duration "often"`}}},
		{name: "negative base ejection time", mesh: &irsv1.Mesh{
			OutlierDetection: &irsv1.OutlierDetection{BaseEjectionTime: "-30s"}},
			want: []wantErr{{"outlier_detection.base_ejection_time", `negative duration "-30s"`}}},
		{name: "max ejection percent over 100", mesh: &irsv1.Mesh{
			OutlierDetection: &irsv1.OutlierDetection{MaxEjectionPercent: "150%"}},
			want: []wantErr{{"outlier_detection.max_ejection_percent", `percentage "150%" outside 0-100%`}}},
		{name: "max ejection percent not a number", mesh: &irsv1.Mesh{
			OutlierDetection: &irsv1.OutlierDetection{MaxEjectionPercent: "half"}},
			want: []wantErr{{"outlier_detection.max_ejection_percent", `invalid percentage "half"`}}},
		{name: "max ejection percent negative", mesh: &irsv1.Mesh{
			OutlierDetection: &irsv1.OutlierDetection{MaxEjectionPercent: "-5%"}},
			want: []wantErr{{"outlier_detection.max_ejection_percent", `percentage "-5%" outside 0-100%`}}},
		{
			name: "every error at once, in document order",
			mesh: &irsv1.Mesh{Type: "consul", Sidecars: "all", Protocol: "http3", Concurrency: 1000,
				Timeout: "x", Retries: &irsv1.MeshRetries{RetryOn: []string{"nope"}, PerTryTimeout: "y",
					RetriableStatusCodes: []uint32{1000}},
				OutlierDetection: &irsv1.OutlierDetection{Interval: "z", BaseEjectionTime: "w",
					MaxEjectionPercent: "101"}},
			want: []wantErr{{"type", "consul"}, {"sidecars", `"all"`}, {"protocol", `"http3"`},
				{"concurrency", "1000"}, {"timeout", `"x"`}, {"retries.retry_on[0]", `"nope"`},
				{"retries.per_try_timeout", `"y"`}, {"retries.retriable_status_codes[0]", "1000"},
				{"outlier_detection.interval", `"z"`}, {"outlier_detection.base_ejection_time", `"w"`},
				{"outlier_detection.max_ejection_percent", `"101"`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := policy.Validate(tt.mesh)
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate(%s) = %d errors %v, want %d: %v", text(tt.mesh), len(errs), errs.Err(), len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if errs[i].Path != w.path || !strings.Contains(errs[i].Err.Error(), w.msg) {
					t.Errorf("error %d = %q at path %q, want one containing %q at path %q", i, errs[i].Err, errs[i].Path, w.msg, w.path)
				}
			}
		})
	}
}

// TestValidateListsAcceptedValues checks that the messages of unknown values say what is accepted.
func TestValidateListsAcceptedValues(t *testing.T) {
	errs := policy.Validate(&irsv1.Mesh{Type: "x", Sidecars: "y", Retries: &irsv1.MeshRetries{RetryOn: []string{"z"}}})
	want := map[string][]string{
		"type":                {"none", "envoy"},
		"sidecars":            {"both", "server-only", "client-only"},
		"retries.retry_on[0]": allRetryConditions,
	}
	for _, e := range errs {
		for _, v := range want[e.Path] {
			if !strings.Contains(e.Err.Error(), v) {
				t.Errorf("%s: message %q does not name the accepted value %q", e.Path, e.Err, v)
			}
		}
		delete(want, e.Path)
	}
	for path := range want {
		t.Errorf("no error at %s, want one", path)
	}
}

// TestValidateErrorsAreFieldErrors checks that the list joins into errors field.Flatten gives back, paths kept.
func TestValidateErrorsAreFieldErrors(t *testing.T) {
	err := policy.Validate(&irsv1.Mesh{Type: "x", Concurrency: 100}).Err()
	var paths []string
	for _, e := range field.Flatten(err) {
		paths = append(paths, e.Path)
	}
	if want := []string{"type", "concurrency"}; !slices.Equal(paths, want) {
		t.Errorf("paths of the joined errors = %v, want %v", paths, want)
	}
}

func TestHasSidecar(t *testing.T) {
	tests := []struct {
		placement string
		serves    bool
		want      bool
	}{
		{placement: "both", serves: true, want: true},
		{placement: "both", serves: false, want: true},
		{placement: "server-only", serves: true, want: true},
		{placement: "server-only", serves: false, want: false},
		{placement: "client-only", serves: true, want: false},
		{placement: "client-only", serves: false, want: true},
		{placement: "", serves: true, want: true}, // unset is the default, both
		{placement: "", serves: false, want: true},
	}
	for _, tt := range tests {
		name := tt.placement
		if name == "" {
			name = "unset"
		}
		if tt.serves {
			name += "/serves"
		} else {
			name += "/load-only"
		}
		t.Run(name, func(t *testing.T) {
			if got := policy.HasSidecar(tt.placement, tt.serves); got != tt.want {
				t.Errorf("HasSidecar(%q, %v) = %v, want %v", tt.placement, tt.serves, got, tt.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name string
		mesh *irsv1.Mesh
		want string
	}{
		{name: "nil", mesh: nil, want: "none"},
		{name: "empty", mesh: &irsv1.Mesh{}, want: "none"},
		{name: "none ignores placement", mesh: &irsv1.Mesh{Type: "none", Sidecars: "server-only"}, want: "none"},
		{name: "envoy", mesh: &irsv1.Mesh{Type: "envoy"}, want: "envoy"},
		{name: "envoy both", mesh: &irsv1.Mesh{Type: "envoy", Sidecars: "both"}, want: "envoy"},
		{name: "envoy server-only", mesh: &irsv1.Mesh{Type: "envoy", Sidecars: "server-only"}, want: "envoy/server-only"},
		{name: "envoy client-only", mesh: &irsv1.Mesh{Type: "envoy", Sidecars: "client-only"}, want: "envoy/client-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.mesh)
			if got := policy.Describe(tt.mesh); got != tt.want {
				t.Errorf("Describe(%s) = %q, want %q", text(tt.mesh), got, tt.want)
			}
			if !proto.Equal(tt.mesh, before) {
				t.Errorf("Describe modified its input: got %s, want %s", text(tt.mesh), text(before))
			}
		})
	}
}

func TestEnabled(t *testing.T) {
	tests := []struct {
		name string
		mesh *irsv1.Mesh
		want bool
	}{
		{name: "nil", mesh: nil, want: false},
		{name: "unset type", mesh: &irsv1.Mesh{}, want: false},
		{name: "none", mesh: &irsv1.Mesh{Type: "none"}, want: false},
		{name: "envoy", mesh: &irsv1.Mesh{Type: "envoy"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := policy.Enabled(tt.mesh); got != tt.want {
				t.Errorf("Enabled(%s) = %v, want %v", text(tt.mesh), got, tt.want)
			}
		})
	}
}
