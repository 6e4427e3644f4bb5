package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress draws a one-line progress bar (to stderr) for one phase:
// units done of total, rate and elapsed time, redrawn every 200 ms.
type Progress struct {
	w      io.Writer
	label  string
	total  int64
	done   atomic.Int64
	start  time.Time
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

// NewProgress starts drawing; call Done to finish the line. A nil writer
// draws nothing.
func NewProgress(w io.Writer, label string, total int) *Progress {
	p := &Progress{w: w, label: label, total: int64(total), start: time.Now(), stop: make(chan struct{})}
	if w == nil {
		return p
	}
	// On a terminal the bar is redrawn in place; in a log, a line every
	// five seconds.
	every, prefix, suffix := 200*time.Millisecond, "\r", ""
	if !isTerminal(w) {
		every, prefix, suffix = 5*time.Second, "", "\n"
	}
	p.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				fmt.Fprint(p.w, prefix+p.Line(time.Since(p.start))+suffix)
			}
		}
	})
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Set records that n units are done (on a nil Progress, nothing).
func (p *Progress) Set(n int) {
	if p != nil {
		p.done.Store(int64(n))
	}
}

// Done stops drawing and ends the line.
func (p *Progress) Done() {
	p.closed.Do(func() {
		close(p.stop)
		p.wg.Wait()
		if p.w != nil {
			fmt.Fprintln(p.w, "\r"+p.Line(time.Since(p.start)))
		}
	})
}

// Line renders the bar for the current count after elapsed.
func (p *Progress) Line(elapsed time.Duration) string {
	return RenderBar(p.label, p.done.Load(), p.total, elapsed, 30)
}

// RenderBar renders "label [#####.....]  50% 5/10 2.5/s 2s".
func RenderBar(label string, done, total int64, elapsed time.Duration, width int) string {
	frac := 0.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	n := int(frac * float64(width))
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	return fmt.Sprintf("%-16s [%s%s] %3.0f%% %d/%d %.0f/s %s ", label, strings.Repeat("#", n), strings.Repeat(".", width-n),
		frac*100, done, total, rate, elapsed.Truncate(100*time.Millisecond))
}
