package webhook

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// The subscriptions share one partition (a deployment has a handful); the
// stream filter drops their changes (topology.StreamFilter).
const subsPK = "WEBHOOKS"

func subKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": store.AttrS(subsPK), "sk": store.AttrS("SUB#" + id)}
}

// Store keeps the subscriptions in the table.
type Store struct {
	db    store.DynamoAPI
	table string
	now   func() time.Time

	// Refresh is how long Active trusts the subscriptions it read.
	Refresh time.Duration
	// Client sends test deliveries (Test); default one that follows no
	// redirects, as deliveries do.
	Client *http.Client
	mu     sync.Mutex
	readAt time.Time
	active []Subscription
}

// NewStore returns the subscription store of table.
func NewStore(db store.DynamoAPI, table string) *Store {
	return &Store{db: db, table: table, now: time.Now, Refresh: DefaultRefresh, Client: defaultClient}
}

// DefaultRefresh is how long the stream function trusts the subscriptions
// it read: a new or changed subscription applies to events at most this
// much later.
const DefaultRefresh = 10 * time.Second

// Create writes a new subscription.
func (s *Store) Create(ctx context.Context, raw []byte) (*Subscription, error) {
	sub, err := Create(raw, s.now())
	if err != nil {
		return nil, err
	}
	if err := s.put(ctx, sub, "attribute_not_exists(pk)"); err != nil {
		return nil, err
	}
	return sub, nil
}

// Get reads a subscription without its secret (404 when none).
func (s *Store) Get(ctx context.Context, id string) (*Subscription, error) {
	sub, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	return sub.Public(), nil
}

// read reads a subscription with its secret (404 when none).
func (s *Store) read(ctx context.Context, id string) (*Subscription, error) {
	if err := ValidateID(id); err != nil {
		return nil, ojserr.NotFoundf("subscription", id)
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: subKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, ojserr.Backend(fmt.Errorf("read subscription %s: %w", id, err))
	}
	if out.Item == nil {
		return nil, ojserr.NotFoundf("subscription", id)
	}
	sub, err := store.Unmarshal[Subscription](out.Item)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	return sub, nil
}

// List lists the subscriptions, without their secrets.
func (s *Store) List(ctx context.Context) ([]Subscription, error) {
	all, err := s.all(ctx)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	for i := range all {
		all[i] = *all[i].Public()
	}
	return all, nil
}

func (s *Store) all(ctx context.Context) ([]Subscription, error) {
	all, err := store.QueryAll[Subscription](ctx, s.db, &dynamodb.QueryInput{TableName: &s.table, KeyConditionExpression: aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": store.AttrS(subsPK)}, ConsistentRead: aws.Bool(true)})
	if all == nil {
		all = []Subscription{}
	}
	return all, err
}

// Update applies a PATCH body. The answer holds the secret only when the
// body replaced it.
func (s *Store) Update(ctx context.Context, id string, raw []byte) (*Subscription, error) {
	sub, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	secret := sub.Secret
	if err := sub.Update(raw, s.now()); err != nil {
		return nil, err
	}
	if err := s.put(ctx, sub, "attribute_exists(pk)"); err != nil {
		return nil, err
	}
	if sub.Secret == secret {
		return sub.Public(), nil
	}
	return sub, nil
}

// Delete removes a subscription (404 when none). Deliveries already
// enqueued for it end without a POST.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return ojserr.NotFoundf("subscription", id)
	}
	out, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: subKey(id), ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return ojserr.Backend(fmt.Errorf("delete subscription %s: %w", id, err))
	}
	if out.Attributes == nil {
		return ojserr.NotFoundf("subscription", id)
	}
	return nil
}

func (s *Store) put(ctx context.Context, sub *Subscription, cond string) error {
	item, err := attributevalue.MarshalMap(sub)
	if err != nil {
		return ojserr.Backend(err)
	}
	key := subKey(sub.ID)
	maps.Copy(key, item)
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: key, ConditionExpression: aws.String(cond)})
	if store.ConditionFailed(err) {
		// An update of a subscription deleted meanwhile (a create's
		// random id does not collide).
		return ojserr.NotFoundf("subscription", sub.ID)
	}
	if err != nil {
		return ojserr.Backend(fmt.Errorf("write subscription %s: %w", sub.ID, err))
	}
	return nil
}

// Active returns the active subscriptions with their secrets, read at most
// once per Refresh.
func (s *Store) Active(ctx context.Context) ([]Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !s.readAt.IsZero() && now.Sub(s.readAt) < s.Refresh {
		return s.active, nil
	}
	all, err := s.all(ctx)
	if err != nil {
		return nil, err
	}
	s.active = slices.DeleteFunc(all, func(sub Subscription) bool { return !sub.Active })
	s.readAt = now
	return s.active, nil
}

// RotateSecret gives a subscription a new generated secret and answers it
// (the only time it is answered); the old secret signs deliveries beside
// it for SecretOverlap, while receivers move to the new one.
func (s *Store) RotateSecret(ctx context.Context, id string) (*Subscription, error) {
	sub, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	sub.rotate(s.now())
	if err := s.put(ctx, sub, "attribute_exists(pk)"); err != nil {
		return nil, err
	}
	return sub, nil
}

// TestResult is the answer of a test delivery (ojs-webhooks.md 6.6).
type TestResult struct {
	Success        bool   `json:"success"`
	StatusCode     int    `json:"status_code,omitempty"`
	ResponseTimeMS int64  `json:"response_time_ms"`
	ResponseBody   string `json:"response_body,omitempty"`
	Error          string `json:"error,omitempty"`
}

// MaxTestTimeout bounds a test delivery, which the API function makes
// while its caller waits (API Gateway answers for at most 29 s).
const MaxTestTimeout = 10 * time.Second

// Test POSTs a synthetic webhook.test event to a subscription's URL, signed
// as a delivery, and reports the answer (the first KiB of its body). It
// runs in the request, unlike deliveries, and retries nothing; an inactive
// subscription is tested too.
func (s *Store) Test(ctx context.Context, id string) (*TestResult, error) {
	sub, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	now := s.now()
	e := events.New("ojs://ojs-serverless/webhooks", EventTest, sub.ID, now, now.UnixNano(), map[string]any{"subscription_id": sub.ID, "url": sub.URL})
	body, err := e.Marshal()
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	sub.TimeoutMS = int(min(sub.Timeout(), MaxTestTimeout) / time.Millisecond)
	code, took, answer, err := post(ctx, s.Client, sub, body, e.ID, e.Type, "test_"+e.ID, 1, now)
	res := &TestResult{Success: err == nil && code >= 200 && code < 300, StatusCode: code, ResponseTimeMS: took,
		ResponseBody: string(answer[:min(len(answer), 1024)])}
	if err != nil {
		res.Error = err.Error()
	}
	return res, nil
}

// EventTest is the type of a test delivery's event.
const EventTest = "webhook.test"
