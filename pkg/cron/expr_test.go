package cron

import (
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNextUTC(t *testing.T) {
	cases := []struct{ expr, after, want string }{
		{"* * * * *", "2026-02-12T14:00:00Z", "2026-02-12T14:01:00Z"},
		{"*/5 * * * *", "2026-02-12T14:03:10Z", "2026-02-12T14:05:00Z"},
		{"0 * * * *", "2026-02-12T14:00:00Z", "2026-02-12T15:00:00Z"},
		{"30 2 * * *", "2026-02-12T14:00:00Z", "2026-02-13T02:30:00Z"},
		{"@daily", "2026-02-12T14:00:00Z", "2026-02-13T00:00:00Z"},
		{"@hourly", "2026-02-12T14:59:59Z", "2026-02-12T15:00:00Z"},
		{"@weekly", "2026-02-12T14:00:00Z", "2026-02-15T00:00:00Z"}, // Sunday
		{"@monthly", "2026-02-12T14:00:00Z", "2026-03-01T00:00:00Z"},
		{"@yearly", "2026-02-12T14:00:00Z", "2027-01-01T00:00:00Z"},
		{"0 9 * * MON-FRI", "2026-02-13T09:00:00Z", "2026-02-16T09:00:00Z"}, // Fri -> Mon
		{"0 9 * * 7", "2026-02-12T00:00:00Z", "2026-02-15T09:00:00Z"},       // 7 is Sunday
		{"0 0 1,15 jan,Jul *", "2026-02-12T00:00:00Z", "2026-07-01T00:00:00Z"},
		{"0 0 L * *", "2026-02-12T00:00:00Z", "2026-02-28T00:00:00Z"},
		{"0 0 L * *", "2028-02-12T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"0 0 15W * *", "2026-02-01T00:00:00Z", "2026-02-16T00:00:00Z"}, // 15th is a Sunday
		{"0 0 1W * *", "2026-02-12T00:00:00Z", "2026-03-02T00:00:00Z"},  // Mar 1 is a Sunday
		{"0 0 LW * *", "2026-05-01T00:00:00Z", "2026-05-29T00:00:00Z"},  // May 31 is a Sunday
		{"0 0 * * 5#3", "2026-02-01T00:00:00Z", "2026-02-20T00:00:00Z"}, // third Friday
		{"0 0 * * FRIL", "2026-02-01T00:00:00Z", "2026-02-27T00:00:00Z"},
		{"0 0 29 2 *", "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"0 0 13 * 5", "2026-02-01T00:00:00Z", "2026-02-06T00:00:00Z"}, // either the 13th or a Friday
		{"30 */10 * * * *", "2026-02-12T14:00:00Z", "2026-02-12T14:00:30Z"},
		{"10-20/5 1 * * *", "2026-02-12T01:12:00Z", "2026-02-12T01:15:00Z"},
		{"5/20 * * * *", "2026-02-12T01:26:00Z", "2026-02-12T01:45:00Z"},
	}
	for _, c := range cases {
		s, err := Parse(c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		got, ok := s.Next(mustTime(t, c.after), time.UTC)
		if !ok || !got.Equal(mustTime(t, c.want)) {
			t.Errorf("%s after %s = %v (%v), want %s", c.expr, c.after, got, ok, c.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, expr := range []string{"", "not a valid cron", "0 0 0 0 0 0 0", "99 25 32 13 8", "60 * * * *", "* 24 * * *",
		"* * 32 * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *", "1,,2 * * * *",
		"* * * * * * *", "@every 500ms", "@every soon", "@fortnightly", "0 0 30 2 *", "* * * * 5#6", "* * 32W * *", "a-b * * * *"} {
		if _, err := Parse(expr); err == nil {
			t.Errorf("Parse(%q) accepted an invalid expression", expr)
		}
	}
}

func TestEvery(t *testing.T) {
	s, err := Parse("@every 1h30m")
	if err != nil {
		t.Fatal(err)
	}
	after := mustTime(t, "2026-02-12T14:00:00Z")
	if got, _ := s.Next(after, time.UTC); !got.Equal(after.Add(90 * time.Minute)) {
		t.Fatalf("@every 1h30m after %v = %v", after, got)
	}
}

func TestDaylightSaving(t *testing.T) {
	ny, err := Zone("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// Spring forward 2026-03-08: 02:30 does not exist; the occurrence is skipped.
	s, _ := Parse("30 2 * * *")
	got, _ := s.Next(mustTime(t, "2026-03-07T07:30:00Z"), ny) // 02:30 EST on the 7th
	if want := mustTime(t, "2026-03-09T06:30:00Z"); !got.Equal(want) {
		t.Errorf("spring forward: next = %v, want %v (the 8th skipped)", got, want)
	}
	// Fall back 2026-11-01: 01:30 happens twice; fire once, at the first (EDT).
	s, _ = Parse("30 1 * * *")
	first, _ := s.Next(mustTime(t, "2026-11-01T00:00:00Z"), ny)
	if want := mustTime(t, "2026-11-01T05:30:00Z"); !first.Equal(want) {
		t.Fatalf("fall back: first = %v, want %v", first, want)
	}
	next, _ := s.Next(first, ny)
	if want := mustTime(t, "2026-11-02T06:30:00Z"); !next.Equal(want) {
		t.Errorf("fall back: fired twice: after %v next = %v, want %v", first, next, want)
	}
	// With hour "*", real time keeps going through the repeated hour.
	s, _ = Parse("0 * * * *")
	at := mustTime(t, "2026-11-01T05:00:00Z") // 01:00 EDT
	n1, _ := s.Next(at, ny)
	if want := mustTime(t, "2026-11-01T06:00:00Z"); !n1.Equal(want) { // 01:00 EST
		t.Errorf("hourly through fall back: %v, want %v", n1, want)
	}
	// A 9am schedule stays at 9am local across the change.
	s, _ = Parse("0 9 * * *")
	summer, _ := s.Next(mustTime(t, "2026-07-01T00:00:00Z"), ny)
	winter, _ := s.Next(mustTime(t, "2026-12-01T00:00:00Z"), ny)
	if summer.UTC().Hour() != 13 || winter.UTC().Hour() != 14 {
		t.Errorf("9am New York: summer %v winter %v", summer.UTC(), winter.UTC())
	}
	tokyo, _ := Zone("Asia/Tokyo")
	got, _ = s.Next(mustTime(t, "2026-02-12T00:00:00Z"), tokyo)
	if want := mustTime(t, "2026-02-13T00:00:00Z"); !got.Equal(want) {
		t.Errorf("9am Tokyo = %v, want %v", got, want)
	}
}

func TestZone(t *testing.T) {
	for _, ok := range []string{"", "UTC", "America/New_York", "Asia/Tokyo", "Europe/London", "Australia/Sydney"} {
		if _, err := Zone(ok); err != nil {
			t.Errorf("Zone(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"EST", "PST", "+05:00", "-08:00", "UTC+5", "Etc/GMT+5", "Mars/Olympus", "../../etc/passwd", "America/New York"} {
		if _, err := Zone(bad); err == nil {
			t.Errorf("Zone(%q) accepted", bad)
		}
	}
}
