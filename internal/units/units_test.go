package units

import "testing"

func TestParseBitRate(t *testing.T) {
	for in, want := range map[string]float64{"100M": 100e6, "1G": 1e9, "2.5G": 2.5e9, "1000000": 1e6, "1Gbit": 1e9,
		"500k": 0, "fast": 0, "": 0, "2000G": 0, "NaN": 0} {
		got, err := ParseBitRate(in)
		if want == 0 {
			if err == nil {
				t.Errorf("%q: got %v, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q = %v, %v; want %v", in, got, err, want)
		}
	}
}
