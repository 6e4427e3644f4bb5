package retry

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var isoDuration = regexp.MustCompile(`^P(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// ParseDuration parses an ISO 8601 duration such as "PT1S", "PT0.5S",
// "PT5M", "PT1H30M" or "P1DT2H". Weeks and days are accepted as exactly 7 and
// 1 times 24 hours; years and months are rejected because their length is
// ambiguous. Negative and empty durations ("P", "PT") are rejected.
func ParseDuration(s string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(s)
	if m == nil || s == "P" || strings.HasSuffix(s, "T") {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q", s)
	}
	units := []time.Duration{7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second}
	var total float64
	for i, u := range units {
		if m[i+1] == "" {
			continue
		}
		v, err := strconv.ParseFloat(m[i+1], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: %w", s, err)
		}
		total += v * float64(u)
	}
	if total > float64(math.MaxInt64) {
		return 0, fmt.Errorf("ISO 8601 duration %q is too long", s)
	}
	return time.Duration(total), nil
}

// FormatDuration renders d as an ISO 8601 duration ("PT1S", "PT1M30S",
// "PT0.5S", "PT0S").
func FormatDuration(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	var b strings.Builder
	b.WriteString("PT")
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
		d -= m * time.Minute
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		b.WriteString("S")
	}
	return b.String()
}
