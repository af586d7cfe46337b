package report

import (
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// TestRecoveryOfAPartialResult: a partial result (its runner killed outright) that ends before a fault's
// window reads as unmeasured, not as a negative time ("not within -7.00s").
func TestRecoveryOfAPartialResult(t *testing.T) {
	for _, tt := range []struct {
		f    *irsv1.FaultRecord
		want string
	}{
		{&irsv1.FaultRecord{T: 12, Until: 5}, "not measured (the result ends at the fault)"},
		{&irsv1.FaultRecord{T: 12, Until: 12}, "not measured (the result ends at the fault)"},
		{&irsv1.FaultRecord{T: 12, Until: 15}, "not within 3.00s"},
		{&irsv1.FaultRecord{T: 12, Until: 15, Recovered: true, Recovery: 1.5}, "1.50s"},
	} {
		if got := Recovery(tt.f); got != tt.want {
			t.Errorf("Recovery(t %v until %v) = %q, want %q", tt.f.GetT(), tt.f.GetUntil(), got, tt.want)
		}
	}
}
