package job

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Error history bounds, in bytes as well as in count, so that a job's item
// stays well under DynamoDB's 400 KB whatever workers report.
const (
	// MaxErrorBytes bounds one recorded error as stored (its JSON):
	// longer fields are cut with a marker (Bounded).
	MaxErrorBytes = 16 << 10
	// MaxErrorHistoryBytes bounds the stored error history (the JSON of
	// every entry together), the oldest dropped first; the current error is
	// stored once more beside it.
	MaxErrorHistoryBytes = 48 << 10
	// maxErrorDetailsBytes is the most details a bounded error keeps as
	// sent; larger details are replaced by a truncated preview.
	maxErrorDetailsBytes = 4 << 10
	// maxErrorField and maxErrorFrame bound the type, code and each
	// backtrace frame; maxErrorMessage the message.
	maxErrorField   = 1 << 10
	maxErrorFrame   = 1 << 10
	maxErrorMessage = 4 << 10
)

// TruncatedMarker ends a field Bounded cut.
const TruncatedMarker = "...[truncated]"

// cut shortens s to at most n bytes (marker included) on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n - len(TruncatedMarker)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + TruncatedMarker
}

func (e ErrorInfo) size() int {
	b, _ := json.Marshal(e)
	return len(b)
}

// Bounded returns e cut to fit MaxErrorBytes, with markers where it was
// cut: type, code, message and frames first; then details of more than
// 4 KiB become a truncated preview and the backtrace loses frames from its
// end (its last frame saying how many). Bounded is idempotent.
func (e ErrorInfo) Bounded() ErrorInfo {
	e.Type, e.Code, e.Message = cut(e.Type, maxErrorField), cut(e.Code, maxErrorField), cut(e.Message, maxErrorMessage)
	if len(e.Backtrace) > 0 {
		bt := make([]string, len(e.Backtrace))
		for i, f := range e.Backtrace {
			bt[i] = cut(f, maxErrorFrame)
		}
		e.Backtrace = bt
	}
	if e.size() <= MaxErrorBytes {
		return e
	}
	if b, _ := json.Marshal(e.Details); len(b) > maxErrorDetailsBytes && !truncatedDetails(e.Details) {
		preview := strings.ToValidUTF8(cut(string(e.Details), 512), "")
		e.Details, _ = json.Marshal(map[string]any{"truncated": true, "original_bytes": len(e.Details), "preview": preview})
	}
	if e.size() <= MaxErrorBytes {
		return e
	}
	// Drop frames from the end until the rest and a marker frame fit.
	frames, dropped := e.Backtrace, 0
	if n := len(frames); n > 0 {
		if _, err := fmt.Sscanf(frames[n-1], "... %d more frames truncated", &dropped); err == nil {
			frames = frames[:n-1]
		} else {
			dropped = 0
		}
	}
	for len(frames) > 0 {
		frames = frames[:len(frames)-1]
		dropped++
		e.Backtrace = append(frames[:len(frames):len(frames)], fmt.Sprintf("... %d more frames truncated", dropped))
		if e.size() <= MaxErrorBytes {
			return e
		}
	}
	// Only fields made of characters JSON escapes in six bytes get here.
	e.Type, e.Code, e.Message = cut(e.Type, 128), cut(e.Code, 128), cut(e.Message, 512)
	if b, _ := json.Marshal(e.Details); len(b) > 512 {
		e.Details, _ = json.Marshal(map[string]any{"truncated": true, "original_bytes": len(e.Details)})
	}
	return e
}

// truncatedDetails reports whether d is details Bounded already replaced.
func truncatedDetails(d json.RawMessage) bool {
	var v struct {
		Truncated bool `json:"truncated"`
		Original  *int `json:"original_bytes"`
	}
	return json.Unmarshal(d, &v) == nil && v.Truncated && v.Original != nil && len(d) <= maxErrorDetailsBytes*7
}

// BoundHistory returns the error history to store after appending e to
// history: every entry Bounded, at most MaxErrorHistory entries and
// MaxErrorHistoryBytes of JSON, the oldest dropped first (e, the newest,
// is always kept), encoded as JSON text each.
func BoundHistory(history []ErrorInfo, e ErrorInfo) []string {
	all := append(append([]ErrorInfo{}, history...), e)
	if len(all) > MaxErrorHistory {
		all = all[len(all)-MaxErrorHistory:]
	}
	out := make([]string, len(all))
	total := 0
	first := len(all)
	for i := len(all) - 1; i >= 0; i-- {
		b, _ := json.Marshal(all[i].Bounded())
		if i < len(all)-1 && total+len(b) > MaxErrorHistoryBytes {
			break
		}
		out[i] = string(b)
		total += len(b)
		first = i
	}
	return out[first:]
}
