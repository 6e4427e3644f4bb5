package events

import "time"

// SetStoreClock sets the clock that stamps event pages; it returns the
// function that restores it.
func SetStoreClock(now func() time.Time) func() {
	old := storeClock
	storeClock = now
	return func() { storeClock = old }
}
