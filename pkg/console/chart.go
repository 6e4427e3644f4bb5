package console

import (
	"fmt"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
)

// Chart draws a throughput history as an SVG line chart: jobs completed
// (processed), failed attempts and jobs enqueued per period.
func Chart(h *admin.History) SafeHTML {
	const w, ht, left, bottom, top, right = 880.0, 220.0, 44.0, 26.0, 12.0, 24.0
	maxV := 1
	for _, b := range h.Data {
		maxV = max(maxV, b.Processed, b.Failed, b.Enqueued)
	}
	n := len(h.Data)
	x := func(i int) float64 {
		if n <= 1 {
			return left
		}
		return left + float64(i)*(w-left-right)/float64(n-1)
	}
	y := func(v int) float64 { return top + (ht-top-bottom)*(1-float64(v)/float64(maxV)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" role="img" aria-label="throughput per %s">`, w, ht, esc(h.Period))
	// Grid and axis labels.
	for _, f := range []float64{0, 0.5, 1} {
		v := int(float64(maxV) * f)
		fmt.Fprintf(&b, `<line class="grid" x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f"/><text class="axis" x="%.0f" y="%.1f" text-anchor="end">%d</text>`,
			left, w-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for i := 0; i < n; i += max(1, n/6) {
		t := h.Data[i].Timestamp
		if len(t) >= 16 {
			t = t[11:16]
		}
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, x(i), ht-8, esc(t))
	}
	series := []struct {
		cls string
		get func(admin.Bucket) int
	}{
		{"s-enqueued", func(b admin.Bucket) int { return b.Enqueued }},
		{"s-processed", func(b admin.Bucket) int { return b.Processed }},
		{"s-failed", func(b admin.Bucket) int { return b.Failed }},
	}
	for _, s := range series {
		var pts []string
		for i, bk := range h.Data {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(s.get(bk))))
		}
		fmt.Fprintf(&b, `<polyline class="series %s" points="%s"/>`, s.cls, strings.Join(pts, " "))
	}
	b.WriteString(`</svg>`)
	return SafeHTML(b.String()) // numbers and escaped labels only
}
