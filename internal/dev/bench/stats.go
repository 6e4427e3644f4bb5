package bench

import (
	"math"
	"sort"
	"time"
)

// Latency summarises a set of durations in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// Summarize computes the count, p50, p99, max and mean of ds; negative
// durations (clock skew between processes) count as zero.
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	ms := make([]float64, len(ds))
	var sum float64
	for i, d := range ds {
		ms[i] = math.Max(0, float64(d)/float64(time.Millisecond))
		sum += ms[i]
	}
	sort.Float64s(ms)
	return Latency{Count: len(ms), P50: Percentile(ms, 50), P99: Percentile(ms, 99), Max: ms[len(ms)-1], Mean: round(sum/float64(len(ms)), 1)}
}

// Percentile is the nearest-rank p-th percentile of sorted values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func round(v float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(v*f) / f
}
