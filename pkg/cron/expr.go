// Package cron provides OJS cron schedules (ojs-cron.md): the expression
// language, time zones, the registration API and the run that fires due
// schedules exactly once.
package cron

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // Lambda's provided.al2023 image has no zoneinfo files.
)

// Schedule is a parsed cron expression.
type Schedule struct {
	every time.Duration // @every: a fixed interval instead of calendar fields

	sec, min, hour, month, dom, dow uint64 // bit sets of allowed values
	domStar, dowStar, hourStar      bool
	domLast, domLastWeekday         bool
	domWeekday                      []int    // nW: nearest weekday to day n
	dowLast                         []int    // nL: last weekday n of the month
	dowNth                          [][2]int // n#k: k-th weekday n of the month
}

// MinEvery is the shortest @every interval: schedules are evaluated at
// most once a second (ojs-cron.md section 7.3).
const MinEvery = time.Second

// searchDays bounds the search for the next occurrence (8 years covers
// February 29th and every weekday/day combination).
const searchDays = 8*366 + 7

var aliases = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var monthNames = map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6, "JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}
var dayNames = map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

// ExprError is a rejected expression; the message says what is wrong.
type ExprError struct{ Msg string }

func (e *ExprError) Error() string { return e.Msg }

func exprErr(format string, a ...any) error { return &ExprError{Msg: fmt.Sprintf(format, a...)} }

// Parse parses a cron expression: 5 fields (minute hour day-of-month month
// day-of-week), 6 fields (seconds first), an alias such as @daily, or
// "@every <Go duration>" of at least a second.
func Parse(expr string) (*Schedule, error) {
	text := strings.TrimSpace(expr)
	if text == "" {
		return nil, exprErr("the cron expression is empty")
	}
	if len(text) > 256 {
		return nil, exprErr("the cron expression is longer than 256 characters")
	}
	s := &Schedule{}
	if strings.HasPrefix(text, "@") {
		lower := strings.ToLower(text)
		if rest, ok := strings.CutPrefix(lower, "@every "); ok {
			d, err := time.ParseDuration(strings.TrimSpace(rest))
			if err != nil {
				return nil, exprErr("%q is not a valid @every duration (use Go durations such as 30m, 1h30m or 45s)", strings.TrimSpace(rest))
			}
			if d < MinEvery {
				return nil, exprErr("@every %s is shorter than the minimum interval of %s", d, MinEvery)
			}
			s.every = d
			return s, nil
		}
		a, ok := aliases[lower]
		if !ok {
			return nil, exprErr("unknown special expression %q (known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, @every <duration>)", text)
		}
		text = a
	}
	fields := strings.Fields(text)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, exprErr("a cron expression has 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first); got %d", len(fields))
	}
	errs := make([]error, 6) // the first one, in field order, is reported
	s.sec, _, errs[0] = parseField(fields[0], "second", 0, 59, nil)
	s.min, _, errs[1] = parseField(fields[1], "minute", 0, 59, nil)
	s.hour, s.hourStar, errs[2] = parseField(fields[2], "hour", 0, 23, nil)
	errs[3] = s.parseDOM(fields[3])
	s.month, _, errs[4] = parseField(fields[4], "month", 1, 12, monthNames)
	errs[5] = s.parseDOW(fields[5])
	if err := cmp.Or(errs...); err != nil {
		return nil, err
	}
	if _, ok := s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.UTC); !ok {
		return nil, exprErr("the expression %q never matches a date", expr)
	}
	return s, nil
}

// Every is the @every interval, or 0 for calendar expressions.
func (s *Schedule) Every() time.Duration { return s.every }

func parseField(f, name string, lo, hi int, names map[string]int) (uint64, bool, error) {
	var set uint64
	star := false
	for _, part := range strings.Split(f, ",") {
		if part == "" {
			return 0, false, exprErr("the %s field %q has an empty list item", name, f)
		}
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n <= 0 || n > hi-lo+1 {
				return 0, false, exprErr("the %s field has an invalid step %q (a whole number from 1 to %d)", name, stepText, hi-lo+1)
			}
			step = n
		}
		var a, b int
		switch {
		case rng == "*":
			a, b = lo, hi
			if !hasStep {
				star = true
			}
		case strings.Contains(rng, "-"):
			as, bs, _ := strings.Cut(rng, "-")
			var err error
			if a, err = value(as, name, lo, hi, names); err != nil {
				return 0, false, err
			}
			if b, err = value(bs, name, lo, hi, names); err != nil {
				return 0, false, err
			}
			if a > b {
				return 0, false, exprErr("the %s range %q runs backwards", name, rng)
			}
		default:
			var err error
			if a, err = value(rng, name, lo, hi, names); err != nil {
				return 0, false, err
			}
			b = a
			if hasStep {
				b = hi
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, star, nil
}

func value(t, name string, lo, hi int, names map[string]int) (int, error) {
	if v, ok := names[strings.ToUpper(t)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(t)
	if err != nil || v < lo || v > hi {
		return 0, exprErr("the %s field has %q; allowed values are %d-%d%s", name, t, lo, hi, nameHint(names))
	}
	return v, nil
}

func nameHint(names map[string]int) string {
	switch len(names) {
	case 12:
		return " or JAN-DEC"
	case 7:
		return " or SUN-SAT"
	}
	return ""
}

func (s *Schedule) parseDOM(f string) error {
	var rest []string
	for _, part := range strings.Split(f, ",") {
		up := strings.ToUpper(part)
		switch {
		case up == "L":
			s.domLast = true
		case up == "LW":
			s.domLastWeekday = true
		case strings.HasSuffix(up, "W") && len(up) > 1:
			n, err := strconv.Atoi(up[:len(up)-1])
			if err != nil || n < 1 || n > 31 {
				return exprErr("the day-of-month field has %q; nW needs a day from 1 to 31", part)
			}
			s.domWeekday = append(s.domWeekday, n)
		default:
			rest = append(rest, part)
		}
	}
	if len(rest) > 0 {
		set, star, err := parseField(strings.Join(rest, ","), "day-of-month", 1, 31, nil)
		if err != nil {
			return err
		}
		s.dom, s.domStar = set, star
	}
	if f == "?" {
		s.dom, s.domStar = 0, true
	}
	return nil
}

func (s *Schedule) parseDOW(f string) error {
	if f == "?" {
		s.dowStar = true
		return nil
	}
	var rest []string
	for _, part := range strings.Split(f, ",") {
		up := strings.ToUpper(part)
		switch {
		case strings.Contains(up, "#"):
			ds, ks, _ := strings.Cut(up, "#")
			d, err := value(ds, "day-of-week", 0, 7, dayNames)
			k, kerr := strconv.Atoi(ks)
			if err != nil || kerr != nil || k < 1 || k > 5 {
				return exprErr("the day-of-week field has %q; use d#k with a weekday and k from 1 to 5", part)
			}
			s.dowNth = append(s.dowNth, [2]int{d % 7, k})
		case up == "L":
			s.dowLast = append(s.dowLast, 6)
		case strings.HasSuffix(up, "L") && len(up) > 1:
			d, err := value(up[:len(up)-1], "day-of-week", 0, 7, dayNames)
			if err != nil {
				return err
			}
			s.dowLast = append(s.dowLast, d%7)
		default:
			rest = append(rest, part)
		}
	}
	if len(rest) > 0 {
		set, star, err := parseField(strings.Join(rest, ","), "day-of-week", 0, 7, dayNames)
		if err != nil {
			return err
		}
		if set&(1<<7) != 0 {
			set = set&^(1<<7) | 1
		}
		s.dow, s.dowStar = set, star
	}
	return nil
}

// dayMatches reports whether the calendar date y-m-d matches the month,
// day-of-month and day-of-week fields. As in POSIX cron, when both day
// fields are restricted a date matching either one matches.
func (s *Schedule) dayMatches(y int, m time.Month, d int) bool {
	if s.month&(1<<uint(m)) == 0 {
		return false
	}
	last := daysIn(y, m)
	wd := int(time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday())
	domOK := s.dom&(1<<uint(d)) != 0 || (s.domLast && d == last) ||
		(s.domLastWeekday && d == nearestWeekday(y, m, last)) || slices.ContainsFunc(s.domWeekday, func(n int) bool { return n <= last && d == nearestWeekday(y, m, n) })
	dowOK := s.dow&(1<<uint(wd)) != 0 || slices.ContainsFunc(s.dowLast, func(n int) bool { return n == wd && d+7 > last }) ||
		slices.ContainsFunc(s.dowNth, func(p [2]int) bool { return p[0] == wd && (d-1)/7+1 == p[1] })
	switch {
	case !s.domStar && !s.dowStar:
		return domOK || dowOK
	case !s.domStar:
		return domOK
	case !s.dowStar:
		return dowOK
	}
	return true
}

func daysIn(y int, m time.Month) int { return time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day() }

// nearestWeekday is the weekday (Mon-Fri) nearest to day n of the month,
// never crossing into another month (Quartz's W).
func nearestWeekday(y int, m time.Month, n int) int {
	last := daysIn(y, m)
	switch time.Date(y, m, n, 12, 0, 0, 0, time.UTC).Weekday() {
	case time.Saturday:
		if n == 1 {
			return 3
		}
		return n - 1
	case time.Sunday:
		if n == last {
			return n - 2
		}
		return n + 1
	}
	return n
}

// Next returns the first occurrence strictly after after, in loc. A wall
// time that does not exist (spring forward) is skipped; one that happens
// twice (fall back) fires once, at its first occurrence, unless the hour
// field is "*", in which case the repeated hour runs again as real time
// passes. ok is false when no occurrence exists within eight years. For
// @every schedules Next is after plus the interval.
func (s *Schedule) Next(after time.Time, loc *time.Location) (time.Time, bool) {
	if s.every > 0 {
		return after.Add(s.every).Truncate(time.Millisecond), true
	}
	loc = cmp.Or(loc, time.UTC)
	local := after.In(loc)
	y, m, d := local.Date()
	day := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).AddDate(0, 0, -1)
	for i := 0; i < searchDays; i++ {
		dy, dm, dd := day.Date()
		day = day.AddDate(0, 0, 1)
		if !s.dayMatches(dy, dm, dd) {
			continue
		}
		if t, ok := s.firstOnDay(dy, dm, dd, after, loc); ok {
			return t, true
		}
	}
	return time.Time{}, false
}

// firstOnDay is the earliest occurrence on one local date after after.
func (s *Schedule) firstOnDay(y int, m time.Month, d int, after time.Time, loc *time.Location) (time.Time, bool) {
	var best time.Time
	found := false
	consider := func(t time.Time) {
		if t.After(after) && (!found || t.Before(best)) {
			best, found = t, true
		}
	}
	for h := 0; h < 24; h++ {
		if s.hour&(1<<uint(h)) == 0 {
			continue
		}
		for mi := 0; mi < 60; mi++ {
			if s.min&(1<<uint(mi)) == 0 {
				continue
			}
			for sec := 0; sec < 60; sec++ {
				if s.sec&(1<<uint(sec)) == 0 {
					continue
				}
				first, second, ok := resolve(y, m, d, h, mi, sec, loc)
				if !ok {
					continue // spring forward: this wall time does not exist
				}
				consider(first)
				if s.hourStar && !second.IsZero() {
					consider(second)
				}
				if found && best.Before(first) {
					return best, true
				}
			}
		}
	}
	return best, found
}

// resolve maps a wall time to its instants: none when it falls in a
// spring-forward gap, the earlier and later ones when it repeats.
func resolve(y int, m time.Month, d, h, mi, sec int, loc *time.Location) (first, second time.Time, ok bool) {
	same := func(t time.Time) bool {
		ty, tm, td := t.Date()
		return ty == y && tm == m && td == d && t.Hour() == h && t.Minute() == mi && t.Second() == sec
	}
	t := time.Date(y, m, d, h, mi, sec, 0, loc)
	if !same(t) {
		return time.Time{}, time.Time{}, false
	}
	for _, delta := range []time.Duration{-time.Hour, time.Hour, -30 * time.Minute, 30 * time.Minute, -2 * time.Hour, 2 * time.Hour} {
		if u := t.Add(delta); same(u) {
			if u.Before(t) {
				return u, t, true
			}
			return t, u, true
		}
	}
	return t, time.Time{}, true
}

// Zone loads an IANA time zone name. Fixed offsets ("+05:00", "UTC+5",
// "Etc/GMT+5") and abbreviations ("EST", "PST") are refused
// (ojs-cron.md section 5.1); an empty name is UTC.
func Zone(name string) (*time.Location, error) {
	switch name {
	case "", "UTC", "Etc/UTC":
		return time.UTC, nil
	}
	if !strings.Contains(name, "/") || strings.HasPrefix(name, "Etc/") || strings.ContainsAny(name, "+:") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("%q is not an IANA time zone name such as America/New_York (offsets and abbreviations are not accepted)", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known IANA time zone", name)
	}
	return loc, nil
}
