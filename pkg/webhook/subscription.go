// Package webhook delivers OJS events to HTTP subscribers (the webhooks
// extension, docs/webhooks.md).
//
// A Subscription names a URL, the event types it wants and a secret. The
// stream function's Fanout turns each stored event a subscription wants
// into a delivery: a job of type JobType on the reserved push-mode queue
// job.WebhookQueue, whose id is derived from the event and the
// subscription (a retried stream batch enqueues nothing twice). The worker
// function's Deliverer POSTs the event with an HMAC-SHA256 signature; a
// failed POST fails the attempt, so the delivery is retried with the
// job's backoff and ends, when its attempts are spent, in the dead letter
// queue, from which an operator redrives it like any job.
package webhook

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// JobType is the type of a delivery job.
const JobType = "ojs.webhook.deliver"

// Limits and defaults of a subscription.
const (
	MaxURLLength       = 2048
	MaxEvents          = 50
	DefaultTimeout     = 10 * time.Second
	MaxTimeout         = 30 * time.Second
	DefaultMaxAttempts = 8
	MaxAttempts        = 20
	// MinSecretLength is the shortest secret accepted; a subscription
	// created without one gets a generated secret of 32 random bytes.
	MinSecretLength = 16
)

// Subscription is one webhook subscription.
type Subscription struct {
	ID  string `json:"id" dynamodbav:"id"`
	URL string `json:"url" dynamodbav:"url"`
	// Events are event types and patterns ("job.*", "*") as for
	// OJS_PUBLISH_EVENTS.
	Events      []string `json:"events" dynamodbav:"events"`
	Active      bool     `json:"active" dynamodbav:"active"`
	Description string   `json:"description,omitempty" dynamodbav:"description,omitempty"`
	// Filter narrows Events to some queues and job types (ojs-webhooks.md
	// 5.2); nil delivers every event of the types named.
	Filter *Filter `json:"filter,omitempty" dynamodbav:"filter,omitempty"`
	// Metadata are the owner's key-value pairs, kept as sent.
	Metadata map[string]any `json:"metadata,omitempty" dynamodbav:"metadata,omitempty"`
	// TimeoutMS bounds one POST; MaxAttempts is the deliveries' retry
	// policy's attempts before the dead letter queue.
	TimeoutMS   int `json:"timeout_ms" dynamodbav:"timeout_ms"`
	MaxAttempts int `json:"max_attempts" dynamodbav:"max_attempts"`
	// Secret signs the deliveries. It is answered once, when the
	// subscription is created (or its secret replaced), and never listed.
	Secret    string `json:"secret,omitempty" dynamodbav:"secret"`
	CreatedAt string `json:"created_at" dynamodbav:"created_at"`
	UpdatedAt string `json:"updated_at" dynamodbav:"updated_at"`
	// PreviousSecret also signs deliveries until PreviousUntil, after a
	// rotation (RotateSecret): receivers move to the new secret meanwhile.
	PreviousSecret string `json:"-" dynamodbav:"prev_secret,omitempty"`
	PreviousUntil  string `json:"-" dynamodbav:"prev_until,omitempty"`
}

// Filter is a subscription's attribute filter: an event is delivered only
// when its queue is one of Queues and its job type one of JobTypes (an
// empty list matches any). Events without a queue or job type (workflow
// events) match only the lists left empty.
type Filter struct {
	Queues   []string `json:"queues,omitempty" dynamodbav:"queues,omitempty"`
	JobTypes []string `json:"job_types,omitempty" dynamodbav:"job_types,omitempty"`
}

// Limits of a filter and of metadata.
const (
	MaxFilterValues = 100
	MaxMetadataSize = 4096
)

// SecretOverlap is how long a rotated secret keeps signing deliveries
// beside the new one (ojs-webhooks.md 8.3).
const SecretOverlap = 24 * time.Hour

// Public is a copy of s without its secret, as reads answer it.
func (s Subscription) Public() *Subscription {
	s.Secret = ""
	return &s
}

// Wants reports whether s is active, subscribed to e's type and its
// filter lets e through.
func (s *Subscription) Wants(e *events.Event) bool {
	if !s.Active || !events.MatchType(s.Events, e.Type) {
		return false
	}
	f := s.Filter
	return f == nil || (len(f.Queues) == 0 || slices.Contains(f.Queues, e.Queue())) &&
		(len(f.JobTypes) == 0 || slices.Contains(f.JobTypes, e.JobType()))
}

// Signature is the X-OJS-Signature of body sent at timestamp ts: signed
// with the secret, and also with the previous one while a rotation's
// overlap lasts (the two comma-separated, ojs-webhooks.md 8.3).
func (s *Subscription) Signature(ts int64, body []byte, now time.Time) string {
	sig := Sign(s.Secret, ts, body)
	if s.PreviousSecret != "" {
		if until, err := time.Parse(time.RFC3339Nano, s.PreviousUntil); err == nil && now.Before(until) {
			sig += "," + Sign(s.PreviousSecret, ts, body)
		}
	}
	return sig
}

// rotate replaces s's secret with a generated one; the old one signs too
// for SecretOverlap.
func (s *Subscription) rotate(now time.Time) {
	s.PreviousSecret, s.PreviousUntil = s.Secret, job.Timestamp(now.Add(SecretOverlap))
	s.Secret = newSecret()
	s.UpdatedAt = job.Timestamp(now)
}

func newSecret() string { return "whsec_" + randomHex(32) }

// Timeout is s's POST timeout.
func (s *Subscription) Timeout() time.Duration {
	if s.TimeoutMS <= 0 {
		return DefaultTimeout
	}
	return time.Duration(s.TimeoutMS) * time.Millisecond
}

// request is a create or update body; nil fields are absent.
type request struct {
	URL         *string   `json:"url"`
	Events      *[]string `json:"events"`
	Secret      *string   `json:"secret"`
	Active      *bool     `json:"active"`
	Description *string   `json:"description"`
	TimeoutMS   *int      `json:"timeout_ms"`
	MaxAttempts *int      `json:"max_attempts"`
	// Filter and Metadata replace the subscription's; JSON null clears them.
	Filter   json.RawMessage `json:"filter"`
	Metadata json.RawMessage `json:"metadata"`
}

func parseRequest(raw []byte) (*request, error) {
	var r request
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, ojserr.Invalid("body", "The subscription must be a JSON object of url, events, filter, metadata, secret, active, description, timeout_ms and max_attempts: %v", err)
	}
	return &r, nil
}

// Create validates a create body (url and events required) and builds the
// subscription, generating its id and, when none is given, its secret.
func Create(raw []byte, now time.Time) (*Subscription, error) {
	r, err := parseRequest(raw)
	if err != nil {
		return nil, err
	}
	if r.URL == nil {
		return nil, ojserr.Invalid("url", "A subscription needs a 'url'.")
	}
	if r.Events == nil {
		return nil, ojserr.Invalid("events", "A subscription needs 'events': event types or patterns such as \"job.completed\" or \"job.*\".")
	}
	s := &Subscription{ID: "whk_" + randomHex(12), Active: true, MaxAttempts: DefaultMaxAttempts, TimeoutMS: int(DefaultTimeout / time.Millisecond),
		CreatedAt: job.Timestamp(now)}
	if r.Secret == nil {
		secret := newSecret()
		r.Secret = &secret
	}
	if err := s.apply(r, now); err != nil {
		return nil, err
	}
	return s, nil
}

// Update applies an update body (PATCH: only the fields present) to s.
func (s *Subscription) Update(raw []byte, now time.Time) error {
	r, err := parseRequest(raw)
	if err != nil {
		return err
	}
	return s.apply(r, now)
}

func (s *Subscription) apply(r *request, now time.Time) error {
	if r.URL != nil {
		if err := validateURL(*r.URL); err != nil {
			return err
		}
		s.URL = *r.URL
	}
	if r.Events != nil {
		evs := *r.Events
		if len(evs) == 0 || len(evs) > MaxEvents {
			return ojserr.Invalid("events", "'events' holds 1 to %d event types or patterns.", MaxEvents)
		}
		if err := events.CheckPatterns("events", evs); err != nil {
			return err
		}
		s.Events = slices.Compact(slices.Sorted(slices.Values(evs)))
	}
	if r.Secret != nil {
		if len(*r.Secret) < MinSecretLength {
			return ojserr.Invalid("secret", "A secret has at least %d characters (omit it and the server generates one).", MinSecretLength)
		}
		s.Secret = *r.Secret
	}
	if r.Active != nil {
		s.Active = *r.Active
	}
	if r.Description != nil {
		if len(*r.Description) > 1024 {
			return ojserr.Invalid("description", "A description has at most 1024 bytes.")
		}
		s.Description = *r.Description
	}
	if r.TimeoutMS != nil {
		if *r.TimeoutMS < 100 || time.Duration(*r.TimeoutMS)*time.Millisecond > MaxTimeout {
			return ojserr.Invalid("timeout_ms", "'timeout_ms' is from 100 to %d.", MaxTimeout/time.Millisecond)
		}
		s.TimeoutMS = *r.TimeoutMS
	}
	if r.MaxAttempts != nil {
		if *r.MaxAttempts < 1 || *r.MaxAttempts > MaxAttempts {
			return ojserr.Invalid("max_attempts", "'max_attempts' is from 1 to %d.", MaxAttempts)
		}
		s.MaxAttempts = *r.MaxAttempts
	}
	if r.Filter != nil {
		f, err := parseFilter(r.Filter)
		if err != nil {
			return err
		}
		s.Filter = f
	}
	if r.Metadata != nil {
		s.Metadata = nil
		if !isNull(r.Metadata) {
			if len(r.Metadata) > MaxMetadataSize || json.Unmarshal(r.Metadata, &s.Metadata) != nil || s.Metadata == nil {
				return ojserr.Invalid("metadata", "'metadata' is a JSON object of at most %d bytes.", MaxMetadataSize)
			}
		}
	}
	s.UpdatedAt = job.Timestamp(now)
	return nil
}

// parseFilter reads a filter object (null or one with no values: none).
func parseFilter(raw json.RawMessage) (*Filter, error) {
	if isNull(raw) {
		return nil, nil
	}
	var f Filter
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, ojserr.Invalid("filter", "'filter' is an object of 'queues' and 'job_types', lists of names: %v", err)
	}
	for field, list := range map[string][]string{"filter.queues": f.Queues, "filter.job_types": f.JobTypes} {
		if len(list) > MaxFilterValues || slices.ContainsFunc(list, func(v string) bool { return v == "" || len(v) > 256 }) {
			return nil, ojserr.Invalid(field, "'%s' holds at most %d names of 1 to 256 bytes.", field, MaxFilterValues)
		}
	}
	if len(f.Queues) == 0 && len(f.JobTypes) == 0 {
		return nil, nil
	}
	f.Queues, f.JobTypes = slices.Compact(slices.Sorted(slices.Values(f.Queues))), slices.Compact(slices.Sorted(slices.Values(f.JobTypes)))
	return &f, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func validateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || len(raw) > MaxURLLength || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return ojserr.Invalid("url", "'url' is an absolute http or https URL of at most %d characters, without credentials or a fragment.", MaxURLLength)
	}
	return nil
}

// ValidateID checks a subscription id's shape.
func ValidateID(id string) error {
	hexPart, ok := strings.CutPrefix(id, "whk_")
	if _, err := hex.DecodeString(hexPart); !ok || err != nil || len(hexPart) != 24 {
		return ojserr.Invalid("id", "'%s' is not a subscription id (whk_ and 24 hex digits).", id)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
