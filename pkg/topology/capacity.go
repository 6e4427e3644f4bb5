package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// Capacity is a provisioned table's capacity: the table and each of its
// indexes scale their read and write capacity units between Min and Max
// to hold TargetPercent utilisation. A steady load is cheaper provisioned
// than on demand (docs/benchmark.md prices both); a spiky one may be
// throttled while auto scaling catches up (it reacts within minutes).
type Capacity struct {
	MinRead, MaxRead   int
	MinWrite, MaxWrite int
	TargetPercent      int
}

// Default bounds of a provisioned table. At 1,000 workflow steps a second
// a step's 10 or so write units need about 14,000 write capacity units at
// 70%: raise MaxWrite for such a load.
const (
	DefaultMinCapacity   = 5
	DefaultMaxCapacity   = 4000
	DefaultTargetPercent = 70
)

// ParseCapacity reads the CDK context value "capacity": "" or "on-demand"
// (nil), "provisioned" (the default bounds), or "provisioned:W,R" with the
// maximum write and read capacity units.
func ParseCapacity(v string) (*Capacity, error) {
	mode, bounds, hasBounds := strings.Cut(v, ":")
	switch mode {
	case "", "on-demand":
		if hasBounds {
			break
		}
		return nil, nil
	case "provisioned":
		c := &Capacity{MinRead: DefaultMinCapacity, MaxRead: DefaultMaxCapacity, MinWrite: DefaultMinCapacity,
			MaxWrite: DefaultMaxCapacity, TargetPercent: DefaultTargetPercent}
		if !hasBounds {
			return c, nil
		}
		w, r, ok := strings.Cut(bounds, ",")
		maxW, errW := strconv.Atoi(w)
		maxR, errR := strconv.Atoi(r)
		if ok && errW == nil && errR == nil && maxW >= c.MinWrite && maxR >= c.MinRead {
			c.MaxWrite, c.MaxRead = maxW, maxR
			return c, nil
		}
	}
	return nil, fmt.Errorf("%q: want on-demand, provisioned or provisioned:W,R (the maximum write and read capacity units, at least %d each)", v, DefaultMinCapacity)
}
