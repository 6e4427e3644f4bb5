package job

import (
	"encoding/json"
	"regexp"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/retry"
)

// KeyLimit is options.rate_limit in the rate-limiting extension's shape
// (ojs-rate-limiting.md 6): the limits of a key that jobs share. FETCH and
// push-mode delivery start a keyed job only while its key has a free
// concurrency slot, a start left in its rate window and its throttle's
// spacing passed; otherwise the job stays available ("wait").
type KeyLimit struct {
	Key string `json:"key"`
	// Concurrency is the most jobs of the key active at once (nil: no
	// limit; 0 holds every job of the key).
	Concurrency *int `json:"concurrency,omitempty"`
	// Rate is the most starts in a fixed window of Period.
	Rate *Window `json:"rate,omitempty"`
	// Throttle spaces starts evenly: Limit per Period.
	Throttle *Window `json:"throttle,omitempty"`
	// OnLimit is what happens to this job while its key allows no start:
	// "" (wait: it stays available) or OnLimitDrop (it is discarded).
	OnLimit string `json:"on_limit,omitempty"`
}

// OnLimitDrop discards a keyed job its key cannot start when it is
// claimed (ojs-rate-limiting.md 5.4: lossy limits).
const OnLimitDrop = "drop"

// Window is a number of starts per period.
type Window struct {
	Limit  int           `json:"limit"`
	Period time.Duration `json:"-"`
	// PeriodText is Period as written (ISO 8601), for answers.
	PeriodText string `json:"period"`
}

// MaxKeyLength bounds a rate limit key (bytes).
const MaxKeyLength = 255

// MaxKeyConcurrency bounds options.rate_limit.concurrency: the key's
// active jobs are held in one item's map.
const MaxKeyConcurrency = 1000

var keyPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._:-]*$`)

// ValidateRateKey checks a rate limit key (ojs-rate-limiting.md 6.2),
// named field in the error.
func ValidateRateKey(field, key string) error {
	if len(key) > MaxKeyLength || !keyPattern.MatchString(key) {
		return ojserr.Invalid(field, "'%s' must match ^[a-zA-Z0-9][a-zA-Z0-9._:-]*$ and be at most %d bytes.", field, MaxKeyLength)
	}
	return nil
}

// keyLimitRequest is options.rate_limit as sent: the extension's shape,
// the shorthand {"key", "rate": n, "period": "second"}, or the queue-level
// {"max_per_second": n}.
type keyLimitRequest struct {
	Key          *string         `json:"key"`
	Concurrency  json.RawMessage `json:"concurrency"`
	Rate         json.RawMessage `json:"rate"`
	Period       string          `json:"period"`
	Throttle     json.RawMessage `json:"throttle"`
	OnLimit      string          `json:"on_limit"`
	MaxPerSecond *float64        `json:"max_per_second"`
}

// parseRateLimit reads options.rate_limit into j: with a key, the key's
// limits (KeyLimit); without, the queue's FETCH rate (RateLimit).
func parseRateLimit(j *Job, raw json.RawMessage) error {
	var r keyLimitRequest
	if err := json.Unmarshal(raw, &r); err != nil {
		return ojserr.Invalid("options.rate_limit", "'options.rate_limit' must be an object: {\"key\": ..., \"concurrency\": n, \"rate\": {\"limit\": n, \"period\": \"PT1M\"}, \"throttle\": {...}} or {\"max_per_second\": n}.")
	}
	if r.Key == nil {
		if r.MaxPerSecond == nil || *r.MaxPerSecond <= 0 || *r.MaxPerSecond > MaxRatePerSecond {
			return ojserr.Invalid("options.rate_limit", "'options.rate_limit' needs a 'key' (the rate-limiting extension's shape) or is {\"max_per_second\": n} with n above 0 and at most %d (the queue's FETCH rate).", MaxRatePerSecond)
		}
		j.RateLimit = *r.MaxPerSecond
		return nil
	}
	if err := ValidateRateKey("options.rate_limit.key", *r.Key); err != nil {
		return err
	}
	if r.OnLimit != "" && r.OnLimit != "wait" && r.OnLimit != OnLimitDrop {
		return ojserr.Invalid("options.rate_limit.on_limit", "'options.rate_limit.on_limit' must be \"wait\" (the job stays available until its key allows it) or \"drop\" (it is discarded); \"reschedule\" is not supported on this backend.")
	}
	if r.MaxPerSecond != nil {
		return ojserr.Invalid("options.rate_limit.max_per_second", "'max_per_second' is the queue-level shape and cannot be combined with a 'key'; use \"rate\": {\"limit\": n, \"period\": \"PT1S\"}.")
	}
	kl, err := r.limits(*r.Key, "options.rate_limit")
	if err != nil {
		return err
	}
	if r.OnLimit == OnLimitDrop {
		kl.OnLimit = OnLimitDrop
	}
	j.KeyLimit = kl
	return nil
}

// limits reads the request's concurrency, rate and throttle as key's
// (field names the object in errors); one of them at least is required.
func (r *keyLimitRequest) limits(key, field string) (*KeyLimit, error) {
	kl := &KeyLimit{Key: key}
	if len(r.Concurrency) > 0 && !isNull(r.Concurrency) {
		n, err := intField(field+".concurrency", r.Concurrency, 0, 0, MaxKeyConcurrency)
		if err != nil {
			return nil, err
		}
		kl.Concurrency = &n
	}
	var err error
	if kl.Rate, err = parseWindow(field+".rate", r.Rate, r.Period); err != nil {
		return nil, err
	}
	if kl.Throttle, err = parseWindow(field+".throttle", r.Throttle, ""); err != nil {
		return nil, err
	}
	if kl.Concurrency == nil && kl.Rate == nil && kl.Throttle == nil {
		return nil, ojserr.Invalid(field, "'%s' needs at least one of 'concurrency', 'rate' or 'throttle'.", field)
	}
	return kl, nil
}

// ParseKeyOverride reads PUT /rate-limits/{key}'s body (ojs-rate-limiting.md
// 10.2): the limits that replace the key's jobs' (concurrency, rate,
// throttle as in options.rate_limit) and, optionally, when they expire
// (expires_at, in the future).
func ParseKeyOverride(key string, raw []byte, now time.Time) (*KeyLimit, time.Time, error) {
	if err := ValidateRateKey("key", key); err != nil {
		return nil, time.Time{}, err
	}
	var r struct {
		keyLimitRequest
		ExpiresAt *string `json:"expires_at"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, time.Time{}, ojserr.Invalid("body", "The body must be an object such as {\"concurrency\": 0, \"expires_at\": \"2026-12-01T13:00:00Z\"}.")
	}
	kl, err := r.limits(key, "body")
	if err != nil {
		return nil, time.Time{}, err
	}
	var until time.Time
	if r.ExpiresAt != nil {
		t, _, err := parseTime("expires_at", r.ExpiresAt, now)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !t.After(now) {
			return nil, time.Time{}, ojserr.Invalid("expires_at", "'expires_at' must be in the future.")
		}
		until = *t
	}
	return kl, until, nil
}

// periodWords are the shorthand periods accepted beside ISO 8601.
var periodWords = map[string]string{"second": "PT1S", "minute": "PT1M", "hour": "PT1H", "day": "P1D"}

// ParseWindow reads {"limit": n, "period": "PT1M"} (a period from 1 ms to
// a day; nil for null or absent), field naming it in errors.
func ParseWindow(field string, raw json.RawMessage) (*Window, error) {
	return parseWindow(field, raw, "")
}

// parseWindow reads {"limit": n, "period": "PT1M"}, or a bare number with
// the shorthand period beside it (one per second when absent).
func parseWindow(field string, raw json.RawMessage, shortPeriod string) (*Window, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var w struct {
		Limit  json.RawMessage `json:"limit"`
		Period string          `json:"period"`
	}
	limitRaw := raw
	if err := json.Unmarshal(raw, &w); err == nil {
		limitRaw = w.Limit
	} else {
		w.Period = shortPeriod
	}
	if len(limitRaw) == 0 {
		return nil, ojserr.Invalid(field+".limit", "'%s.limit' is required.", field)
	}
	n, err := intField(field+".limit", limitRaw, 0, 1, MaxRatePerSecond*3600)
	if err != nil {
		return nil, err
	}
	text := w.Period
	if p, ok := periodWords[text]; ok {
		text = p
	} else if text == "" {
		text = "PT1S"
	}
	d, err := retry.ParseDuration(text)
	if err != nil || d < time.Millisecond || d > 24*time.Hour {
		return nil, ojserr.Invalid(field+".period", "'%s.period' must be an ISO 8601 duration from PT0.001S to P1D (or \"second\", \"minute\", \"hour\", \"day\").", field)
	}
	return &Window{Limit: n, Period: d, PeriodText: text}, nil
}

// MarshalKeyLimit is the policy as stored on a job (JSON).
func MarshalKeyLimit(kl *KeyLimit) string {
	b, _ := json.Marshal(kl)
	return string(b)
}

// UnmarshalKeyLimit reads a policy stored by MarshalKeyLimit.
func UnmarshalKeyLimit(s string) (*KeyLimit, error) {
	var kl KeyLimit
	if err := json.Unmarshal([]byte(s), &kl); err != nil {
		return nil, err
	}
	for _, w := range []*Window{kl.Rate, kl.Throttle} {
		if w != nil {
			d, err := retry.ParseDuration(w.PeriodText)
			if err != nil {
				return nil, err
			}
			w.Period = d
		}
	}
	return &kl, nil
}
