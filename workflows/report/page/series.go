package page

import (
	"math"
	"strconv"
)

// Values are a series' points; NaN is a gap (null in JSON). They are written with three significant digits at
// most: a chart shows no more, and a long run's page stays small.
type Values []float64

// MarshalJSON writes the values compactly.
func (v Values) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+6*len(v))
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendNumber(b, x)
	}
	return append(b, ']'), nil
}

func appendNumber(b []byte, x float64) []byte {
	switch a := math.Abs(x); {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return append(b, "null"...)
	case a == 0:
		return append(b, '0')
	case a >= 100:
		return strconv.AppendFloat(b, math.Round(x), 'f', -1, 64)
	case a >= 1e-3:
		digits := 2 - int(math.Floor(math.Log10(a)))
		scale := math.Pow(10, float64(digits))
		return strconv.AppendFloat(b, math.Round(x*scale)/scale, 'f', -1, 64)
	}
	return strconv.AppendFloat(b, x, 'g', 3, 64)
}

// Aggregations of the seconds a point stands for when a series is downsampled.
type aggregate int

const (
	mean  aggregate = iota // rates, CPU, memory
	worst                  // latency, 5xx rate: a short burst must stay visible
)

// downsample folds every k consecutive values into one (their mean or their highest), gaps ignored.
func downsample(v []float64, k int, how aggregate) Values {
	if k <= 1 {
		return v
	}
	out := make(Values, 0, (len(v)+k-1)/k)
	for i := 0; i < len(v); i += k {
		acc, n := 0.0, 0
		if how == worst {
			acc = math.Inf(-1)
		}
		for _, x := range v[i:min(i+k, len(v))] {
			if math.IsNaN(x) {
				continue
			}
			n++
			if how == worst {
				acc = max(acc, x)
			} else {
				acc += x
			}
		}
		switch {
		case n == 0:
			out = append(out, math.NaN())
		case how == mean:
			out = append(out, acc/float64(n))
		default:
			out = append(out, acc)
		}
	}
	return out
}
