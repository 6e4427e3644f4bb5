package job_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

func encodedLen(t testing.TB, e job.ErrorInfo) int {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func TestBoundedKeepsAnErrorThatFits(t *testing.T) {
	t.Parallel()
	e := job.ErrorInfo{Type: "x", Message: "boom", Backtrace: []string{"a", "b"}, Details: json.RawMessage(`{"k":1}`), Attempt: 2}
	a, _ := json.Marshal(e)
	b, _ := json.Marshal(e.Bounded())
	if string(a) != string(b) {
		t.Fatalf("changed: %s", b)
	}
}

// TestBoundedCutsWithMarkers is the largest FAIL the API accepts: 64 KiB
// of details and 50 frames of 1 KiB.
func TestBoundedCutsWithMarkers(t *testing.T) {
	t.Parallel()
	frames := make([]string, 50)
	for i := range frames {
		frames[i] = fmt.Sprintf("frame %d ", i) + strings.Repeat("f", 2000)
	}
	details := `{"dump":"` + strings.Repeat("d", 64<<10-12) + `"}`
	e := job.ErrorInfo{Type: "big", Message: strings.Repeat("m", 10000), Backtrace: frames, Details: json.RawMessage(details)}.Bounded()
	if n := encodedLen(t, e); n > job.MaxErrorBytes {
		t.Fatalf("bounded error is %d bytes", n)
	}
	if !strings.HasSuffix(e.Message, job.TruncatedMarker) || len(e.Message) != 4<<10 {
		t.Fatalf("message of %d bytes: ...%s", len(e.Message), e.Message[len(e.Message)-20:])
	}
	var d struct {
		Truncated bool   `json:"truncated"`
		Original  int    `json:"original_bytes"`
		Preview   string `json:"preview"`
	}
	if err := json.Unmarshal(e.Details, &d); err != nil || !d.Truncated || d.Original != len(details) || !strings.HasPrefix(d.Preview, `{"dump":"ddd`) {
		t.Fatalf("details: %s", e.Details)
	}
	last := e.Backtrace[len(e.Backtrace)-1]
	var dropped int
	if _, err := fmt.Sscanf(last, "... %d more frames truncated", &dropped); err != nil || dropped+len(e.Backtrace)-1 != 50 || !strings.HasPrefix(e.Backtrace[0], "frame 0 ") {
		t.Fatalf("backtrace of %d frames ending %q", len(e.Backtrace), last)
	}
	if again := e.Bounded(); encodedLen(t, again) != encodedLen(t, e) {
		t.Fatal("Bounded is not idempotent")
	}
}

// TestBoundHistoryDropsTheOldestFirst: the history stays within its byte
// budget and count, keeps its order and always keeps the newest error.
func TestBoundHistoryDropsTheOldestFirst(t *testing.T) {
	t.Parallel()
	var history []job.ErrorInfo
	for i := 0; i < 30; i++ {
		e := job.ErrorInfo{Type: "t", Message: fmt.Sprintf("attempt %d", i), Attempt: i, Details: json.RawMessage(`"` + strings.Repeat("d", 3000+i*100) + `"`)}
		out := job.BoundHistory(history, e)
		total := 0
		for _, s := range out {
			total += len(s)
		}
		if total > job.MaxErrorHistoryBytes || len(out) > job.MaxErrorHistory {
			t.Fatalf("after %d errors: %d entries, %d bytes", i+1, len(out), total)
		}
		history = history[:0]
		for _, s := range out {
			var x job.ErrorInfo
			if err := json.Unmarshal([]byte(s), &x); err != nil {
				t.Fatal(err)
			}
			history = append(history, x)
		}
		if history[len(history)-1].Attempt != i {
			t.Fatalf("the newest error is not last: %+v", history[len(history)-1])
		}
		for k := 1; k < len(history); k++ {
			if history[k].Attempt != history[k-1].Attempt+1 {
				t.Fatalf("history out of order or with a gap: %d then %d", history[k-1].Attempt, history[k].Attempt)
			}
		}
	}
	if len(history) >= job.MaxErrorHistory || history[0].Attempt == 0 {
		t.Fatalf("the byte budget dropped nothing: %d entries from attempt %d", len(history), history[0].Attempt)
	}
}

func FuzzBounded(f *testing.F) {
	f.Add("type", "code", "message", []byte(`{"k":"v"}`), "frame", 3)
	f.Add(strings.Repeat("<", 2000), strings.Repeat("\x01", 2000), strings.Repeat("\"", 9000), []byte(`"`+strings.Repeat("<", 9000)+`"`), strings.Repeat("\\", 3000), 60)
	f.Fuzz(func(t *testing.T, typ, code, msg string, details []byte, frame string, frames int) {
		e := job.ErrorInfo{Type: typ, Code: code, Message: msg}
		if json.Valid(details) {
			e.Details = details
		}
		for i := 0; i < frames%200; i++ {
			e.Backtrace = append(e.Backtrace, frame)
		}
		b := e.Bounded()
		n := encodedLen(t, b)
		if n > job.MaxErrorBytes {
			t.Fatalf("bounded error is %d bytes", n)
		}
		x, _ := json.Marshal(b)
		y, _ := json.Marshal(b.Bounded())
		if string(x) != string(y) {
			t.Fatalf("not idempotent:\n%s\n%s", x, y)
		}
	})
}
