package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/worker"
)

// Headers of a delivery.
const (
	HeaderSignature = "X-OJS-Signature"
	HeaderTimestamp = "X-OJS-Timestamp"
	HeaderEventID   = "X-OJS-Event-Id"
	HeaderEventType = "X-OJS-Event-Type"
	HeaderDelivery  = "X-OJS-Delivery-Id"
	HeaderAttempt   = "X-OJS-Delivery-Attempt"
	HeaderSub       = "X-OJS-Subscription-Id"
)

// Sign is the X-OJS-Signature value of body sent at timestamp (Unix
// seconds): "sha256=" and the hex HMAC-SHA256, keyed by the secret, of the
// timestamp, a dot and the body. A receiver recomputes it over the raw body
// and rejects a timestamp too far from its clock (a replay).
func Sign(secret string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a delivery's signature (one of the comma-separated ones,
// during a secret rotation) and that its timestamp is within tolerance of
// now (a receiver's side of Sign).
func Verify(secret, signature, timestamp string, body []byte, now time.Time, tolerance time.Duration) bool {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > tolerance {
		return false
	}
	want := []byte(Sign(secret, ts, body))
	for sig := range strings.SplitSeq(signature, ",") {
		if hmac.Equal([]byte(strings.TrimSpace(sig)), want) {
			return true
		}
	}
	return false
}

// Deliverer runs delivery jobs in the worker function: it reads the
// subscription (a deleted or paused one ends the delivery without a POST)
// and POSTs the event to its URL, signed.
type Deliverer struct {
	Subs *Store
	// Client sends the POSTs; default a client with no redirects followed.
	Client *http.Client
	Now    func() time.Time
}

// Register adds the delivery handler to mux.
func (d *Deliverer) Register(mux *worker.Mux) error { return mux.Handle(JobType, d) }

// Result is a delivery job's result.
type Result struct {
	Status     int    `json:"status,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	Skipped    string `json:"skipped,omitempty"`
}

// Handle delivers one event. A 2xx answer completes the delivery; a
// network error, a timeout, 408, 429 or 5xx fails the attempt (retried
// with backoff); any other status sends it to the dead letter queue at
// once (the receiver refused it; redrive it once fixed).
func (d *Deliverer) Handle(ctx context.Context, j *worker.Job) (any, error) {
	var a Args
	if err := j.Bind(&a); err != nil {
		return nil, err
	}
	sub, err := d.Subs.read(ctx, a.SubscriptionID)
	if err != nil {
		if ojserr.As(err).Code == ojserr.NotFound {
			return Result{Skipped: "subscription deleted"}, nil
		}
		return nil, err
	}
	if !sub.Active {
		return Result{Skipped: "subscription inactive"}, nil
	}
	body := []byte(a.Event)
	var head struct{ ID, Type string }
	if err := json.Unmarshal(body, &head); err != nil {
		return nil, worker.NonRetryable("invalid_event", err.Error())
	}
	now := time.Now()
	if d.Now != nil {
		now = d.Now()
	}
	c, took, _, err := post(ctx, d.client(), sub, body, head.ID, head.Type, j.ID, j.Attempt, now)
	switch {
	case errors.Is(err, errInvalidURL):
		return nil, &worker.Error{Type: "webhook.invalid_url", Message: err.Error(), Code: "DEAD_LETTER"}
	case errors.Is(err, context.DeadlineExceeded):
		return nil, worker.Retry("webhook.timeout", fmt.Sprintf("%s did not answer within %s.", sub.URL, sub.Timeout()))
	case err != nil:
		return nil, worker.Retry("webhook.unreachable", err.Error())
	}
	switch {
	case c >= 200 && c < 300:
		return Result{Status: c, DurationMS: took}, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return nil, &worker.Error{Type: "webhook.status_" + strconv.Itoa(c), Message: fmt.Sprintf("%s answered %d.", sub.URL, c), Code: "RETRY",
			Details: map[string]any{"status": c}}
	default:
		return nil, &worker.Error{Type: "webhook.status_" + strconv.Itoa(c), Message: fmt.Sprintf("%s refused the delivery with %d.", sub.URL, c), Code: "DEAD_LETTER",
			Details: map[string]any{"status": c}}
	}
}

// errInvalidURL is post's error for a URL no request can be made of.
var errInvalidURL = errors.New("invalid webhook URL")

// post POSTs body to sub's URL, signed, within sub's timeout, and returns
// the answer's status, how long it took and the first 64 KiB of its body.
func post(ctx context.Context, client *http.Client, sub *Subscription, body []byte, eventID, eventType, deliveryID string, attempt int, now time.Time) (int, int64, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, sub.Timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("%w: %v", errInvalidURL, err)
	}
	ts := now.Unix()
	for k, v := range map[string]string{"Content-Type": "application/json", "User-Agent": "ojs-serverless-webhooks/1",
		HeaderTimestamp: strconv.FormatInt(ts, 10), HeaderSignature: sub.Signature(ts, body, now), HeaderEventID: eventID,
		HeaderEventType: eventType, HeaderDelivery: deliveryID, HeaderAttempt: strconv.Itoa(attempt), HeaderSub: sub.ID} {
		req.Header.Set(k, v)
	}
	start := time.Now()
	res, err := client.Do(req)
	if err != nil {
		return 0, time.Since(start).Milliseconds(), nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, time.Since(start).Milliseconds(), b, nil
}

func (d *Deliverer) client() *http.Client {
	if d.Client != nil {
		return d.Client
	}
	return defaultClient
}

// defaultClient follows no redirects: a subscription names the URL it
// receives at.
var defaultClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
