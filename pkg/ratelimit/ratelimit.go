// Package ratelimit owns the rate limit keys of the rate-limiting
// extension (ojs-rate-limiting.md): one item per key holding the key's
// policy (the last admitted job's options.rate_limit), its concurrency
// slots (job id -> attempt), its fixed rate window's count and its
// throttle's next start.
//
// A keyed job is started only in a transaction with Take's update of its
// key's item (store.Store.ApplyWith): the start is counted atomically with
// the claim, and refused, the job staying available, while the key is
// full. A slot is freed when its attempt ends: by the stream function
// (Release, on the job's change out of that attempt), or by the next
// claim that finds the key full and its holders gone (Stale).
//
// A claim that finds its key full marks the key held (MarkHeld, once per
// episode); the next start clears the mark (Take). The stream function
// derives rate_limit.exceeded and rate_limit.released from those two
// changes of the key's item (Events).
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Key items: pk RLK#<key>, sk RLK.
const (
	keyPrefix = "RLK#"
	keySK     = "RLK"
)

// Attribute names of a key item.
const (
	attrKey    = "key"
	attrPolicy = "policy"
	attrSlots  = "slots"
	attrWindow = "wn"
	attrCount  = "wc"
	attrNext   = "next_ms"
	attrAt     = "updated_at"
	// attrHeld is the limit holding the key's jobs since attrHeldAt (set
	// by MarkHeld, removed by the next Take), attrHeldN its use then,
	// attrEpisode counts the marks, attrLastJob the job whose start
	// removed the last one.
	attrHeld    = "held"
	attrHeldAt  = "held_at"
	attrHeldN   = "held_n"
	attrEpisode = "ep"
	attrLastJob = "last_job"
	// attrOverride is an operator's policy in place of the jobs' until
	// attrOverrideUntil (ms; absent: until removed), SetOverride's;
	// attrUntil holds every start until then (ms), attrUntilWhy says why
	// (PauseUntil: a handler's rate_limit_until).
	attrOverride      = "override"
	attrOverrideUntil = "ov_until"
	attrUntil         = "until_ms"
	attrUntilWhy      = "until_why"
)

// ErrNotFound answers Get for a key no job was admitted with.
var ErrNotFound = errors.New("rate limit key not found")

// Keys reads and writes the key items of the job table.
type Keys struct {
	db    store.DynamoAPI
	table string
	// listed holds the keys this process registered (list).
	listed sync.Map
}

// New returns the keys of table through db (store.Store.DB).
func New(db store.DynamoAPI, table string) *Keys { return &Keys{db: db, table: table} }

func itemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": store.AttrS(keyPrefix + key), "sk": store.AttrS(keySK)}
}

// State is a key's item as read.
type State struct {
	Key    string
	Policy *job.KeyLimit
	// Slots holds the key's active attempts: job id -> attempt.
	Slots map[string]int
	// Window and Count are the rate window last counted in (its index
	// since the epoch in periods) and its starts.
	Window int64
	Count  int
	// Next is the throttle's earliest next start (zero: none).
	Next time.Time
	// Held is the limit a claim found holding the key's jobs, since no
	// start (""; MarkHeld); HeldN the limit's use then; Episode counts
	// the marks; LastJob is the job whose start cleared the last one.
	Held    Limit
	HeldN   int
	Episode int64
	LastJob string
	// HeldAt is when the mark was set, Updated when the item last was.
	HeldAt, Updated time.Time
	// Override is an operator's policy in place of Policy until
	// OverrideUntil (zero: until removed); Limits says which applies.
	Override      *job.KeyLimit
	OverrideUntil time.Time
	// Until holds every start of the key until then (a handler's
	// rate_limit_until, PauseUntil), for UntilReason.
	Until       time.Time
	UntilReason string
	// overrideRaw is the override as stored (Take's condition).
	overrideRaw string
}

// Limits is the policy that applies at now: the override while it lasts,
// else the last admitted job's.
func (st *State) Limits(now time.Time) *job.KeyLimit {
	if st.Override != nil && (st.OverrideUntil.IsZero() || now.Before(st.OverrideUntil)) {
		return st.Override
	}
	return st.Policy
}

type item struct {
	Key    string         `dynamodbav:"key"`
	Policy string         `dynamodbav:"policy"`
	Slots  map[string]int `dynamodbav:"slots"`
	Window int64          `dynamodbav:"wn"`
	Count  int            `dynamodbav:"wc"`
	NextMS int64          `dynamodbav:"next_ms"`
	Held   string         `dynamodbav:"held"`
	HeldN  int            `dynamodbav:"held_n"`
	Ep     int64          `dynamodbav:"ep"`
	Last   string         `dynamodbav:"last_job"`
	HeldAt string         `dynamodbav:"held_at"`
	At     string         `dynamodbav:"updated_at"`
	Ov     string         `dynamodbav:"override"`
	OvTill int64          `dynamodbav:"ov_until"`
	Until  int64          `dynamodbav:"until_ms"`
	Why    string         `dynamodbav:"until_why"`
}

// Decode reads a key item (as returned by a refused Take, say); nil for
// an absent one.
func Decode(av map[string]types.AttributeValue) (*State, error) {
	if len(av) == 0 {
		return nil, nil
	}
	if _, ok := av[attrSlots].(*types.AttributeValueMemberM); !ok && av[attrSlots] != nil {
		// DynamoDB Local's stream images carry an empty map as absent or as
		// another attribute's value; the table's item, and AWS, as a map.
		av = maps.Clone(av)
		delete(av, attrSlots)
	}
	it, err := store.Unmarshal[item](av)
	if err != nil {
		return nil, err
	}
	// A key an operator overrode before any job was admitted has no
	// policy of its own: no limits but the override's.
	p := &job.KeyLimit{Key: it.Key}
	if it.Policy != "" {
		if p, err = job.UnmarshalKeyLimit(it.Policy); err != nil {
			return nil, fmt.Errorf("rate limit key %s: %w", it.Key, err)
		}
	}
	st := &State{Key: it.Key, Policy: p, Slots: it.Slots, Window: it.Window, Count: it.Count,
		Held: Limit(it.Held), HeldN: it.HeldN, Episode: it.Ep, LastJob: it.Last, UntilReason: it.Why}
	if st.overrideRaw = it.Ov; it.Ov != "" {
		if st.Override, err = job.UnmarshalKeyLimit(it.Ov); err != nil {
			return nil, fmt.Errorf("rate limit key %s's override: %w", it.Key, err)
		}
	}
	st.Next, st.OverrideUntil, st.Until = msTime(it.NextMS), msTime(it.OvTill), msTime(it.Until)
	st.HeldAt, _ = time.Parse(time.RFC3339Nano, it.HeldAt)
	st.Updated, _ = time.Parse(time.RFC3339Nano, it.At)
	return st, nil
}

// msTime is Unix milliseconds as a time (zero for 0).
func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// DecodeKey reads a stream image: ok is false for an item that is not a
// rate limit key.
func DecodeKey(av map[string]types.AttributeValue) (*State, bool, error) {
	if sk, _ := av["sk"].(*types.AttributeValueMemberS); sk == nil || sk.Value != keySK {
		return nil, false, nil
	}
	st, err := Decode(av)
	return st, st != nil, err
}

// conflictTries bounds the tries of a write of a key's item that met a
// keyed claim's transaction on it (TransactionConflictException, which
// the SDK does not retry).
const conflictTries = 6

// write applies u to key's item (under c when set) with UpdateItem, tried
// again (with backoff) while a transaction holds the item.
func (k *Keys) write(ctx context.Context, key string, u expression.UpdateBuilder, c *expression.ConditionBuilder, rv types.ReturnValue) (*dynamodb.UpdateItemOutput, error) {
	b := expression.NewBuilder().WithUpdate(u)
	if c != nil {
		b = b.WithCondition(*c)
	}
	expr, err := b.Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.UpdateItemInput{TableName: &k.table, Key: itemKey(key), UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ReturnValues: rv}
	for try := 0; ; try++ {
		out, err := k.db.UpdateItem(ctx, in)
		if _, ok := errors.AsType[*types.TransactionConflictException](err); !ok || try+1 >= conflictTries {
			return out, err
		}
		if err := ctxsleep.Wait(ctx, store.ConflictBackoff(try)); err != nil {
			return nil, err
		}
	}
}

// Record writes a keyed job's policy on its key's item at admission (the
// last admitted job's policy is the key's) and returns the key's state.
func (k *Keys) Record(ctx context.Context, p *job.KeyLimit, now time.Time) (*State, error) {
	return k.record(ctx, p, now, expression.Value(job.MarshalKeyLimit(p)))
}

// Ensure is Record that keeps the key's policy when it has one (a key
// whose policy one writer owns: a tenant's, set by its limits).
func (k *Keys) Ensure(ctx context.Context, p *job.KeyLimit, now time.Time) (*State, error) {
	return k.record(ctx, p, now, expression.IfNotExists(expression.Name(attrPolicy), expression.Value(job.MarshalKeyLimit(p))))
}

func (k *Keys) record(ctx context.Context, p *job.KeyLimit, now time.Time, policy expression.OperandBuilder) (*State, error) {
	u := expression.Set(expression.Name(attrKey), expression.Value(p.Key)).
		Set(expression.Name(attrPolicy), policy).
		Set(expression.Name(attrSlots), expression.IfNotExists(expression.Name(attrSlots), expression.Value(map[string]int{}))).
		Set(expression.Name(attrAt), expression.Value(job.Timestamp(now)))
	out, err := k.write(ctx, p.Key, u, nil, types.ReturnValueAllNew)
	if err != nil {
		return nil, fmt.Errorf("record rate limit key %s: %w", p.Key, err)
	}
	if err := k.list(ctx, p.Key); err != nil {
		return nil, err
	}
	return Decode(out.Attributes)
}

// Get reads a key's state (strongly consistent); ErrNotFound when no job
// was admitted with it.
func (k *Keys) Get(ctx context.Context, key string) (*State, error) {
	out, err := k.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &k.table, Key: itemKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("read rate limit key %s: %w", key, err)
	}
	st, err := Decode(out.Item)
	if err == nil && st == nil {
		err = ErrNotFound
	}
	return st, err
}

// Limit names the limit that holds a key's jobs.
type Limit string

const (
	Concurrency Limit = "concurrency"
	Rate        Limit = "rate"
	Throttle    Limit = "throttle"
	// Dynamic is a hold until a time a handler reported (PauseUntil).
	Dynamic Limit = "dynamic"
)

// Wait is how long, from now, the key allows no start, and the limit
// that says so (0, "": a start is allowed). A full concurrency limit
// frees no sooner than an attempt ends: its wait is unknown (-1).
func (st *State) Wait(now time.Time) (time.Duration, Limit) {
	if st.Until.After(now) {
		return st.Until.Sub(now), Dynamic
	}
	p := st.Limits(now)
	if c := p.Concurrency; c != nil && len(st.Slots) >= *c {
		return -1, Concurrency
	}
	if w := p.Rate; w != nil && st.Window == window(w, now) && st.Count >= w.Limit {
		return time.UnixMilli((st.Window + 1) * w.Period.Milliseconds()).Sub(now), Rate
	}
	if p.Throttle != nil && st.Next.After(now) {
		return st.Next.Sub(now), Throttle
	}
	return 0, ""
}

// window is the index of the fixed window of w holding now.
func window(w *job.Window, now time.Time) int64 {
	return now.UnixMilli() / max(w.Period.Milliseconds(), 1)
}

// spacing is the throttle's interval between starts.
func spacing(w *job.Window) time.Duration { return w.Period / time.Duration(max(w.Limit, 1)) }

// Take is the update that counts a start of job id's attempt under st's
// key at now (st as read: a start it allows, Wait 0), conditioned on
// the key item being still as st says in what the start depends on; its
// refusal returns the item as it was.
func (k *Keys) Take(st *State, id string, attempt int, now time.Time) (*types.Update, error) {
	p := st.Limits(now)
	u := expression.Set(expression.Name(attrAt), expression.Value(job.Timestamp(now)))
	c := expression.AttributeExists(expression.Name("pk")).
		And(expression.Or(expression.AttributeNotExists(expression.Name(attrUntil)), expression.Name(attrUntil).LessThanEqual(expression.Value(now.UnixMilli()))))
	// Decided on the override as read: one set or removed since refuses.
	if st.Override != nil {
		c = c.And(expression.Name(attrOverride).Equal(expression.Value(st.overrideRaw)))
	} else {
		c = c.And(expression.AttributeNotExists(expression.Name(attrOverride)))
	}
	if p.Concurrency != nil {
		u = u.Set(expression.Name(attrSlots+"."+id), expression.Value(attempt))
		c = c.And(expression.Name(attrSlots).Size().LessThan(expression.Value(*p.Concurrency)))
	}
	if w := p.Rate; w != nil {
		cur := window(w, now)
		if st.Window == cur {
			u = u.Add(expression.Name(attrCount), expression.Value(1))
			c = c.And(expression.Name(attrWindow).Equal(expression.Value(cur)), expression.Name(attrCount).LessThan(expression.Value(w.Limit)))
		} else {
			u = u.Set(expression.Name(attrWindow), expression.Value(cur)).Set(expression.Name(attrCount), expression.Value(1))
			c = c.And(expression.Or(expression.AttributeNotExists(expression.Name(attrWindow)), expression.Name(attrWindow).LessThan(expression.Value(cur))))
		}
	}
	if st.Held != "" {
		// The key starts jobs again: the stream derives rate_limit.released.
		u = u.Remove(expression.Name(attrHeld)).Remove(expression.Name(attrHeldAt)).Remove(expression.Name(attrHeldN)).
			Set(expression.Name(attrLastJob), expression.Value(id))
	}
	if w := p.Throttle; w != nil {
		u = u.Set(expression.Name(attrNext), expression.Value(now.Add(spacing(w)).UnixMilli()))
		c = c.And(expression.Or(expression.AttributeNotExists(expression.Name(attrNext)), expression.Name(attrNext).LessThanEqual(expression.Value(now.UnixMilli()))))
	}
	expr, err := expression.NewBuilder().WithUpdate(u).WithCondition(c).Build()
	if err != nil {
		return nil, err
	}
	return &types.Update{TableName: &k.table, Key: itemKey(st.Key), UpdateExpression: expr.Update(),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}, nil
}

// MarkHeld records that limit holds st's key's jobs (a claim found it
// full at now), unless a mark is there already: the stream derives
// rate_limit.exceeded from it.
func (k *Keys) MarkHeld(ctx context.Context, st *State, limit Limit, now time.Time) error {
	use := len(st.Slots)
	if limit == Rate {
		use = st.Count
	}
	u := expression.Set(expression.Name(attrHeld), expression.Value(string(limit))).
		Set(expression.Name(attrHeldAt), expression.Value(job.Timestamp(now))).
		Set(expression.Name(attrHeldN), expression.Value(use)).
		Add(expression.Name(attrEpisode), expression.Value(1))
	c := expression.AttributeExists(expression.Name("pk")).And(expression.AttributeNotExists(expression.Name(attrHeld)))
	_, err := k.write(ctx, st.Key, u, &c, types.ReturnValueNone)
	if err != nil && !store.ConditionFailed(err) {
		return fmt.Errorf("mark rate limit key %s held: %w", st.Key, err)
	}
	return nil
}

// Release frees the slot job id's attempt holds under key, if it still
// does (idempotent: a slot taken by a later attempt stays).
func (k *Keys) Release(ctx context.Context, key, id string, attempt int) error {
	c := expression.Name(attrSlots + "." + id).Equal(expression.Value(attempt))
	_, err := k.write(ctx, key, expression.Remove(expression.Name(attrSlots+"."+id)), &c, types.ReturnValueNone)
	if store.ConditionFailed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release job %s's slot of rate limit key %s: %w", id, key, err)
	}
	return nil
}

// Stale lists the slots of st whose attempts are over, given the jobs
// that hold them as read now (a job absent from jobs is gone).
func (st *State) Stale(jobs map[string]*job.Job) map[string]int {
	out := map[string]int{}
	for id, attempt := range st.Slots {
		j := jobs[id]
		if j == nil || j.State != job.Active || j.Attempt != attempt {
			out[id] = attempt
		}
	}
	return out
}

// Info is a key's state as GET /ojs/v1/rate-limits/{key} answers it
// (ojs-rate-limiting.md 10.1).
type Info struct {
	Key         string          `json:"key"`
	Concurrency *ConcurrencyUse `json:"concurrency,omitempty"`
	Rate        *RateUse        `json:"rate,omitempty"`
	Throttle    *ThrottleUse    `json:"throttle,omitempty"`
	// Override is set while an operator's override (PUT) applies: the
	// limits above are its.
	Override *OverrideInfo `json:"override,omitempty"`
	// Dynamic is set while a handler's rate_limit_until holds the key.
	Dynamic *DynamicHold `json:"dynamic,omitempty"`
}

// OverrideInfo says that an override applies, and until when.
type OverrideInfo struct {
	Active    bool   `json:"active"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// DynamicHold is a hold a handler reported (ojs-rate-limiting.md 9.1).
type DynamicHold struct {
	Until  string `json:"until"`
	Reason string `json:"reason,omitempty"`
}

// ConcurrencyUse is a key's concurrency limit and its use.
type ConcurrencyUse struct {
	Limit     int `json:"limit"`
	Active    int `json:"active"`
	Available int `json:"available"`
}

// RateUse is a key's rate window and its count.
type RateUse struct {
	Limit          int    `json:"limit"`
	Period         string `json:"period"`
	CurrentCount   int    `json:"current_count"`
	WindowResetsAt string `json:"window_resets_at"`
}

// ThrottleUse is a key's throttle and its next start.
type ThrottleUse struct {
	Limit         int    `json:"limit"`
	Period        string `json:"period"`
	NextAllowedAt string `json:"next_allowed_at"`
}

// Info is st at now.
func (st *State) Info(now time.Time) Info {
	p := st.Limits(now)
	in := Info{Key: st.Key}
	if p == st.Override {
		in.Override = &OverrideInfo{Active: true}
		if !st.OverrideUntil.IsZero() {
			in.Override.ExpiresAt = job.Timestamp(st.OverrideUntil)
		}
	}
	if st.Until.After(now) {
		in.Dynamic = &DynamicHold{Until: job.Timestamp(st.Until), Reason: st.UntilReason}
	}
	if c := p.Concurrency; c != nil {
		in.Concurrency = &ConcurrencyUse{Limit: *c, Active: len(st.Slots), Available: max(*c-len(st.Slots), 0)}
	}
	if w := p.Rate; w != nil {
		cur, n := window(w, now), 0
		if st.Window == cur {
			n = st.Count
		}
		in.Rate = &RateUse{Limit: w.Limit, Period: w.PeriodText, CurrentCount: n,
			WindowResetsAt: job.Timestamp(time.UnixMilli((cur + 1) * w.Period.Milliseconds()))}
	}
	if w := p.Throttle; w != nil {
		in.Throttle = &ThrottleUse{Limit: w.Limit, Period: w.PeriodText, NextAllowedAt: job.Timestamp(maxTime(st.Next, now))}
	}
	return in
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Headers are the X-RateLimit-* headers (ojs-rate-limiting.md 10.4) of an
// enqueue under st's key at now: its most binding start limit — the rate
// window, else the throttle, else concurrency — with what is left of it
// and when it next frees (Unix seconds).
func (st *State) Headers(now time.Time) map[string]string {
	in := st.Info(now)
	var limit, left int
	var reset time.Time
	switch {
	case in.Rate != nil:
		w := st.Limits(now).Rate
		limit, left = w.Limit, max(w.Limit-in.Rate.CurrentCount, 0)
		reset = time.UnixMilli((window(w, now) + 1) * w.Period.Milliseconds())
	case in.Throttle != nil:
		limit, left, reset = in.Throttle.Limit, 1, maxTime(st.Next, now)
		if st.Next.After(now) {
			left = 0
		}
	case in.Concurrency != nil:
		limit, left, reset = in.Concurrency.Limit, in.Concurrency.Available, now
	default:
		return nil
	}
	return map[string]string{
		"X-RateLimit-Limit":     strconv.Itoa(limit),
		"X-RateLimit-Remaining": strconv.Itoa(left),
		"X-RateLimit-Reset":     strconv.FormatInt(int64(math.Ceil(float64(reset.UnixMilli())/1000)), 10),
	}
}
