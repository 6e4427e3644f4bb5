package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/console"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// These tests drive the real handler, lifecycle service, workflow engine
// and store over a DynamoDB client that stores nothing: refusingDB records
// each call and fails it. So they show what the API decodes, validates and
// would send to DynamoDB, and nothing about persistence (the e2e suite
// covers that against DynamoDB Local).

var errRefused = errors.New("refusingDB: storage is not available in this test")

// DynamoDB limits the requests refusingDB checks: a request over them would
// fail on AWS with a ValidationException, which the API reports as a 500.
const (
	maxItemBytes       = 400 << 10
	maxTransactBytes   = 4 << 20
	maxTransactItems   = 100
	maxPartitionKeyLen = 2048
	maxSortKeyLen      = 1024
)

// refusingDB implements store.DynamoAPI: every call is recorded, checked
// against DynamoDB's request limits and refused.
type refusingDB struct {
	mu       sync.Mutex
	calls    []string
	problems []string
}

var _ store.DynamoAPI = (*refusingDB)(nil)

func (d *refusingDB) record(op string, problems ...string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, op)
	for _, p := range problems {
		if p != "" {
			d.problems = append(d.problems, op+": "+p)
		}
	}
	return fmt.Errorf("%s: %w", op, errRefused)
}

func (d *refusingDB) reset() (calls, problems []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	calls, problems = d.calls, d.problems
	d.calls, d.problems = nil, nil
	return calls, problems
}

func (d *refusingDB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, d.record("GetItem", checkKeys(in.Key)...)
}

func (d *refusingDB) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, d.record("PutItem", checkItem(in.Item)...)
}

func (d *refusingDB) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, d.record("UpdateItem", checkUpdate(in.Key, in.ExpressionAttributeValues)...)
}

func (d *refusingDB) DeleteItem(_ context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return nil, d.record("DeleteItem", checkKeys(in.Key)...)
}

func (d *refusingDB) BatchGetItem(_ context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	var ps []string
	for _, ka := range in.RequestItems {
		if len(ka.Keys) > 100 {
			ps = append(ps, fmt.Sprintf("%d keys in one request (at most 100)", len(ka.Keys)))
		}
		for _, k := range ka.Keys {
			ps = append(ps, checkKeys(k)...)
		}
	}
	return nil, d.record("BatchGetItem", ps...)
}

func (d *refusingDB) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	var ps []string
	// Values compared with key attributes must be non-empty and within
	// the key length limits.
	for _, name := range placeholder.FindAllString(deref(in.KeyConditionExpression), -1) {
		if s, ok := in.ExpressionAttributeValues[name].(*types.AttributeValueMemberS); ok {
			if s.Value == "" || len(s.Value) > maxPartitionKeyLen {
				ps = append(ps, fmt.Sprintf("key condition value %s has %d bytes", name, len(s.Value)))
			}
		}
	}
	return nil, d.record("Query", ps...)
}

func (d *refusingDB) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var ps []string
	if len(in.TransactItems) > maxTransactItems {
		ps = append(ps, fmt.Sprintf("%d items in one transaction", len(in.TransactItems)))
	}
	total := 0
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			ps = append(ps, checkItem(it.Put.Item)...)
			total += itemSize(it.Put.Item)
		case it.Update != nil:
			ps = append(ps, checkUpdate(it.Update.Key, it.Update.ExpressionAttributeValues)...)
			total += itemSize(it.Update.Key) + itemSize(it.Update.ExpressionAttributeValues)
		case it.Delete != nil:
			ps = append(ps, checkKeys(it.Delete.Key)...)
		case it.ConditionCheck != nil:
			ps = append(ps, checkKeys(it.ConditionCheck.Key)...)
		}
	}
	if total > maxTransactBytes {
		ps = append(ps, fmt.Sprintf("transaction of %d bytes", total))
	}
	return nil, d.record("TransactWriteItems", ps...)
}

func (d *refusingDB) BatchWriteItem(_ context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	var ps []string
	for _, reqs := range in.RequestItems {
		if len(reqs) > 25 {
			ps = append(ps, fmt.Sprintf("%d requests in one BatchWriteItem", len(reqs)))
		}
		for _, r := range reqs {
			switch {
			case r.PutRequest != nil:
				ps = append(ps, checkItem(r.PutRequest.Item)...)
			case r.DeleteRequest != nil:
				ps = append(ps, checkKeys(r.DeleteRequest.Key)...)
			}
		}
	}
	return nil, d.record("BatchWriteItem", ps...)
}

var placeholder = regexp.MustCompile(`:[A-Za-z0-9_]+`)

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func checkItem(item map[string]types.AttributeValue) []string {
	ps := checkKeys(item)
	if n := itemSize(item); n > maxItemBytes {
		ps = append(ps, fmt.Sprintf("item of %d bytes", n))
	}
	return ps
}

func checkUpdate(key, values map[string]types.AttributeValue) []string {
	ps := checkKeys(key)
	if n := itemSize(key) + itemSize(values); n > maxItemBytes {
		ps = append(ps, fmt.Sprintf("update writing %d bytes", n))
	}
	return ps
}

// checkKeys checks the table and index key attributes present in item.
func checkKeys(item map[string]types.AttributeValue) []string {
	t := topology.JobTable
	keys := []topology.IndexKey{t.PartitionKey, t.SortKey}
	for _, ix := range t.Indexes {
		keys = append(keys, ix.PartitionKey, ix.SortKey)
	}
	var ps []string
	for i, k := range keys {
		s, ok := item[k.Name].(*types.AttributeValueMemberS)
		if !ok {
			continue
		}
		limit := maxPartitionKeyLen
		if i%2 == 1 {
			limit = maxSortKeyLen
		}
		if s.Value == "" || len(s.Value) > limit {
			ps = append(ps, fmt.Sprintf("key attribute %s has %d bytes (limit %d, not empty)", k.Name, len(s.Value), limit))
		}
	}
	return ps
}

// itemSize approximates DynamoDB's item size: attribute names plus values.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		return len(x.Value)/2 + 1
	case *types.AttributeValueMemberB:
		return len(x.Value)
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range x.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		return 3 + itemSize(x.Value) + len(x.Value)
	default:
		return 1
	}
}

// harness is the API served over refusingDB with a captured log.
type harness struct {
	srv *httpapi.Server
	db  *refusingDB
	log *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	s.b.Reset()
	return out
}

var fixedNow = time.Date(2026, 3, 15, 9, 30, 0, 0, time.UTC)

// newHarness serves the full API over storage that refuses every call;
// token is its AuthToken, tokens "level:token" pairs of its Tokens.
func newHarness(token string, level slog.Level, tokens ...string) *harness {
	scoped, err := httpapi.ParseTokens(strings.Join(tokens, ","))
	if err != nil {
		panic(err)
	}
	h := &harness{db: &refusingDB{}, log: &syncBuffer{}}
	logger := slog.New(slog.NewJSONHandler(h.log, &slog.HandlerOptions{Level: level}))
	st := store.New(h.db, "fuzz")
	now := func() time.Time { return fixedNow }
	qsvc := queue.NewService(st, queue.Config{Logger: logger, Now: now})
	svc := lifecycle.New(st, lifecycle.Config{Logger: logger, Now: now, Queues: qsvc})
	wfs := workflow.New(st, workflow.Config{Logger: logger, Now: now})
	dead := deadletter.New(st, svc, qsvc, deadletter.Config{Logger: logger})
	ad := admin.New(st, qsvc.Store(), svc, qsvc, dead, admin.Config{Logger: logger, Now: now})
	con, err := console.New(console.Config{Admin: ad, Workflows: wfs, AuthToken: token, Logger: logger})
	if err != nil {
		panic(err)
	}
	h.srv = httpapi.New(httpapi.Services{Producer: svc, Worker: svc, Queues: qsvc, Progress: svc}, st, wfs, httpapi.Config{AuthToken: token, Tokens: scoped, Logger: logger, Now: now, Admin: ad, Console: con, DeadLetter: dead})
	return h
}

// serve sends one request; headers are name, value pairs. A target that
// is not a valid request URI (which no HTTP server would route) answers nil.
func (h *harness) serve(method, target string, body []byte, headers ...string) *httptest.ResponseRecorder {
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://ojs.test"+target, rd)
	if err != nil || !strings.HasPrefix(target, "/") {
		return nil
	}
	if body != nil {
		req.Header.Set("Content-Type", httpapi.ContentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return rec
}

type errorEnvelope struct {
	Error *struct {
		Code      ojserr.Code    `json:"code"`
		Type      string         `json:"type"`
		Message   string         `json:"message"`
		Retryable *bool          `json:"retryable"`
		Details   map[string]any `json:"details"`
		RequestID string         `json:"request_id"`
	} `json:"error"`
}

// bindingCodes are the error codes of ojs-http-binding.md 16.3, and
// conflict, which the public conformance suite requires.
var bindingCodes = map[ojserr.Code]bool{"handler_error": true, "timeout": true, "cancelled": true, "invalid_payload": true,
	"invalid_request": true, "not_found": true, "backend_error": true, "rate_limited": true, "duplicate": true, "queue_paused": true,
	"schema_validation": true, "unsupported": true, "conflict": true}

// checkOutcome asserts the API's contract for any input: no panic; a
// rejection is a 4xx OJS error decided before any storage call (so it
// cannot leave a partial write); a 5xx only comes from the refused storage
// after validation passed; and nothing sent to storage would break a
// DynamoDB limit. okStatus lists the success statuses the route may answer
// without storage (none for most). It returns the storage calls made.
func (h *harness) checkOutcome(t *testing.T, what string, rec *httptest.ResponseRecorder, okStatus ...int) []string {
	t.Helper()
	calls, problems := h.db.reset()
	logs := h.log.take()
	if strings.Contains(logs, "panic serving request") {
		t.Fatalf("%s: panic: %s", what, logs)
	}
	for _, p := range problems {
		t.Errorf("%s: accepted input makes a request DynamoDB would reject: %s", what, p)
	}
	if ct := rec.Header().Get("Content-Type"); ct != httpapi.ContentType {
		t.Fatalf("%s: content type %q", what, ct)
	}
	raw := rec.Body.Bytes()
	if !json.Valid(raw) {
		t.Fatalf("%s: response body is not JSON: %q", what, raw)
	}
	status := rec.Code
	for _, s := range okStatus {
		if status == s {
			return calls
		}
	}
	var env errorEnvelope
	if err := json.Unmarshal(raw, &env); err != nil || env.Error == nil {
		t.Fatalf("%s: status %d without an OJS error: %s", what, status, raw)
	}
	e := env.Error
	if e.Message == "" || e.Retryable == nil || e.RequestID == "" || e.RequestID != rec.Header().Get("X-Request-Id") {
		t.Fatalf("%s: malformed error envelope: %s", what, raw)
	}
	if !bindingCodes[e.Code] && !strings.HasPrefix(string(e.Code), "x_") {
		t.Fatalf("%s: code %s is neither in the HTTP binding's table nor x_-prefixed: %s", what, e.Code, raw)
	}
	kind := e.Code // the specific kind: the type, when the code was mapped
	if e.Code == ojserr.InvalidRequest && e.Type != "" && e.Type != "validation_error" || strings.HasPrefix(string(e.Code), "x_") {
		kind = ojserr.Code(e.Type)
	}
	if e.Type == "validation_error" {
		kind = ojserr.ValidationError
	}
	if want := (&ojserr.Error{Code: kind}).Status(); want != status && status != http.StatusConflict {
		t.Fatalf("%s: code %s (%s) answered with %d (its status is %d)", what, e.Code, kind, status, want)
	}
	switch {
	case status >= 400 && status < 500:
		if len(calls) > 0 {
			t.Fatalf("%s: rejected with %d %s after storage calls %v: %s", what, status, e.Code, calls, raw)
		}
		if *e.Retryable && e.Code != ojserr.RateLimited && e.Code != ojserr.QueuePaused {
			t.Fatalf("%s: a rejection of bad input is retryable: %s", what, raw)
		}
	case status == http.StatusInternalServerError && e.Code == ojserr.BackendError:
		if len(calls) == 0 {
			t.Fatalf("%s: 500 without any storage call (bad input answered as a server error?): %s\n%s", what, raw, logs)
		}
	default:
		t.Fatalf("%s: unexpected status %d: %s", what, status, raw)
	}
	return calls
}
