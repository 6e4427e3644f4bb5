// Package retry implements the OJS retry policy (ojs-retry.md): parsing and
// validation with partial-override semantics, the backoff strategies with
// cap and jitter, and non-retryable error matching.
package retry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
)

// Strategy names a backoff strategy. The OJS default is exponential.
type Strategy string

// Backoff strategies (ojs-retry.md section 3). "constant" is accepted as an
// alias of "none".
const (
	Exponential Strategy = "exponential"
	Linear      Strategy = "linear"
	None        Strategy = "none"
	Polynomial  Strategy = "polynomial"
)

// Exhaustion actions.
const (
	OnExhaustionDiscard    = "discard"
	OnExhaustionDeadLetter = "dead_letter"
)

// Policy is an effective retry policy: every field is set.
type Policy struct {
	// MaxAttempts is the total number of attempts including the first;
	// 0 and 1 both mean no retry. Default 3.
	MaxAttempts int
	// InitialInterval is the delay before the first retry. Default 1 s.
	InitialInterval time.Duration
	// BackoffCoefficient (>= 1) drives exponential and polynomial growth.
	// Default 2.0.
	BackoffCoefficient float64
	// MaxInterval caps every delay, before and after jitter. Default 5 min.
	MaxInterval time.Duration
	// Jitter multiplies the delay by a uniform factor in [0.5, 1.5).
	// Default true.
	Jitter bool
	// NonRetryableErrors lists error types (exact, or prefix with ".*")
	// that end the job at once.
	NonRetryableErrors []string
	// OnExhaustion is "discard" (default) or "dead_letter".
	OnExhaustion string
	// Strategy is the backoff strategy. Default exponential.
	Strategy Strategy
}

// Default is the OJS default policy (ojs-retry.md section 8).
func Default() Policy {
	return Policy{MaxAttempts: 3, InitialInterval: time.Second, BackoffCoefficient: 2.0, MaxInterval: 5 * time.Minute, Jitter: true,
		NonRetryableErrors: []string{}, OnExhaustion: OnExhaustionDiscard, Strategy: Exponential}
}

// wire is the JSON form. Durations are accepted as ISO 8601 strings or as
// integer milliseconds in the *_ms spelling the HTTP binding examples use.
type wire struct {
	MaxAttempts          *json.Number     `json:"max_attempts,omitempty"`
	InitialInterval      *string          `json:"initial_interval,omitempty"`
	InitialIntervalMS    *json.Number     `json:"initial_interval_ms,omitempty"`
	BackoffCoefficient   *json.Number     `json:"backoff_coefficient,omitempty"`
	MaxInterval          *string          `json:"max_interval,omitempty"`
	MaxIntervalMS        *json.Number     `json:"max_interval_ms,omitempty"`
	Jitter               *json.RawMessage `json:"jitter,omitempty"`
	NonRetryableErrors   *json.RawMessage `json:"non_retryable_errors,omitempty"`
	OnExhaustion         *string          `json:"on_exhaustion,omitempty"`
	BackoffStrategy      *string          `json:"backoff_strategy,omitempty"`
	BackoffStrategyAlias *string          `json:"backoff,omitempty"`
}

// FieldError is a validation failure of one policy field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("retry.%s: %s", e.Field, e.Reason) }

func bad(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Parse merges the JSON object raw over the default policy and validates the
// result (ojs-retry.md sections 8.1 and 11). A nil or empty raw yields the
// default. Errors are *FieldError.
func Parse(raw json.RawMessage) (Policy, error) {
	p := Default()
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return p, nil
	}
	var w wire
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return p, bad("", "must be an object with valid field types: %v", err)
	}
	if w.MaxAttempts != nil {
		n, err := w.MaxAttempts.Int64()
		if err != nil || n < 0 || n > 1000 {
			return p, bad("max_attempts", "must be an integer between 0 and 1000")
		}
		p.MaxAttempts = int(n)
	}
	var err error
	if p.InitialInterval, err = durationField("initial_interval", w.InitialInterval, w.InitialIntervalMS, p.InitialInterval); err != nil {
		return p, err
	}
	if p.MaxInterval, err = durationField("max_interval", w.MaxInterval, w.MaxIntervalMS, p.MaxInterval); err != nil {
		return p, err
	}
	if w.BackoffCoefficient != nil {
		f, err := w.BackoffCoefficient.Float64()
		if err != nil || f < 1 || f > 100 || math.IsNaN(f) {
			return p, bad("backoff_coefficient", "must be a number between 1.0 and 100")
		}
		p.BackoffCoefficient = f
	}
	if w.Jitter != nil {
		if err := json.Unmarshal(*w.Jitter, &p.Jitter); err != nil {
			return p, bad("jitter", "must be a boolean")
		}
	}
	if w.NonRetryableErrors != nil {
		var list []string
		if err := json.Unmarshal(*w.NonRetryableErrors, &list); err != nil {
			return p, bad("non_retryable_errors", "must be an array of strings")
		}
		if len(list) > 100 {
			return p, bad("non_retryable_errors", "must have at most 100 entries")
		}
		for _, s := range list {
			if s == "" || len(s) > 255 {
				return p, bad("non_retryable_errors", "entries must be 1 to 255 characters")
			}
		}
		p.NonRetryableErrors = list
	}
	if w.OnExhaustion != nil {
		if *w.OnExhaustion != OnExhaustionDiscard && *w.OnExhaustion != OnExhaustionDeadLetter {
			return p, bad("on_exhaustion", `must be "discard" or "dead_letter"`)
		}
		p.OnExhaustion = *w.OnExhaustion
	}
	if s := cmp.Or(w.BackoffStrategy, w.BackoffStrategyAlias); s != nil {
		switch st := Strategy(strings.ToLower(*s)); st {
		case Exponential, Linear, Polynomial:
			p.Strategy = st
		case None, "constant", "fixed":
			p.Strategy = None
		default:
			return p, bad("backoff_strategy", "must be exponential, linear, none (constant) or polynomial")
		}
	}
	if p.MaxInterval < p.InitialInterval {
		return p, bad("max_interval", "must be greater than or equal to initial_interval")
	}
	return p, nil
}

func durationField(name string, iso *string, ms *json.Number, def time.Duration) (time.Duration, error) {
	switch {
	case iso != nil:
		d, err := ParseDuration(*iso)
		if err != nil {
			return def, bad(name, "%v", err)
		}
		if d <= 0 {
			return def, bad(name, "must be greater than zero")
		}
		return d, nil
	case ms != nil:
		n, err := ms.Int64()
		if err != nil || n <= 0 {
			return def, bad(name+"_ms", "must be a positive integer")
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	return def, nil
}

// MarshalJSON renders the policy in its canonical OJS form.
func (p Policy) MarshalJSON() ([]byte, error) {
	nre := p.NonRetryableErrors
	if nre == nil {
		nre = []string{}
	}
	return json.Marshal(struct {
		MaxAttempts        int      `json:"max_attempts"`
		InitialInterval    string   `json:"initial_interval"`
		BackoffCoefficient float64  `json:"backoff_coefficient"`
		MaxInterval        string   `json:"max_interval"`
		Jitter             bool     `json:"jitter"`
		NonRetryableErrors []string `json:"non_retryable_errors"`
		OnExhaustion       string   `json:"on_exhaustion"`
		BackoffStrategy    Strategy `json:"backoff_strategy"`
	}{p.MaxAttempts, FormatDuration(p.InitialInterval), p.BackoffCoefficient, FormatDuration(p.MaxInterval), p.Jitter, nre, p.OnExhaustion, p.Strategy})
}

// UnmarshalJSON parses a stored or client policy (see Parse).
func (p *Policy) UnmarshalJSON(b []byte) error {
	v, err := Parse(b)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// CanRetry reports whether a job that just finished attempt (1-based) may
// run again.
func (p Policy) CanRetry(attempt int) bool { return attempt < p.MaxAttempts }

// Delay is the wait before the next attempt after attempt (1-based) failed.
// rnd returns a uniform float in [0, 1); it is only called when Jitter is on.
func (p Policy) Delay(attempt int, rnd func() float64) time.Duration {
	n := max(attempt, 1) // retry number: retry 1 follows attempt 1
	base := float64(p.InitialInterval)
	var raw float64
	switch p.Strategy {
	case None:
		raw = base
	case Linear:
		raw = base * float64(n)
	case Polynomial:
		raw = base * math.Pow(float64(n), p.BackoffCoefficient)
	default:
		raw = base * math.Pow(p.BackoffCoefficient, float64(n-1))
	}
	maxD := float64(p.MaxInterval)
	if raw > maxD || math.IsInf(raw, 0) || math.IsNaN(raw) {
		raw = maxD
	}
	if p.Jitter && rnd != nil {
		raw = min(raw*(0.5+rnd()), maxD)
	}
	return time.Duration(max(raw, 0))
}

// IsNonRetryable reports whether errType matches NonRetryableErrors: exactly,
// or by prefix for entries ending in ".*".
func (p Policy) IsNonRetryable(errType string) bool {
	if errType == "" {
		return false
	}
	for _, e := range p.NonRetryableErrors {
		if e == errType {
			return true
		}
		if prefix, ok := strings.CutSuffix(e, ".*"); ok && strings.HasPrefix(errType, prefix+".") {
			return true
		}
	}
	return false
}
