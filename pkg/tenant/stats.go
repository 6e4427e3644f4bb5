package tenant

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// EventLog is the event log a tenant's counts are read from (implemented
// by *events.Store).
type EventLog interface {
	QueryEvents(ctx context.Context, f events.Filter, now time.Time) (*events.Page, error)
}

// StatsWindow is the span a tenant's job counts cover.
const StatsWindow = 24 * time.Hour

// maxStatsPages bounds the event pages (of events.MaxLimit events) one
// Stats reads: past it the counts are marked truncated.
const maxStatsPages = 50

// Stats is a tenant's use (ojs-multi-tenancy.md 10.2).
type Stats struct {
	TenantID string   `json:"tenant_id"`
	Queues   []string `json:"queues"`
	// TotalJobs is the jobs enqueued within the window.
	TotalJobs  int        `json:"total_jobs"`
	Jobs       Counts     `json:"jobs"`
	Throughput Throughput `json:"throughput"`
	Window     string     `json:"window"`
	// Truncated is set when the window held more events than one read
	// takes (maxStatsPages): the counts are then lower bounds.
	Truncated   bool   `json:"truncated,omitempty"`
	FirstSeenAt string `json:"first_seen_at"`
	// Limits are the tenant's limits and their use now.
	Limits map[string]LimitUse `json:"limits"`
}

// LimitUse is a limit and its current use.
type LimitUse struct {
	Limit   int `json:"limit"`
	Current int `json:"current"`
}

// Counts are a tenant's jobs: available now (pull mode, from the tenant
// index) and what happened to them within the window (from their events).
type Counts struct {
	Available int `json:"available"`
	Enqueued  int `json:"enqueued_24h"`
	Started   int `json:"started_24h"`
	Completed int `json:"completed_24h"`
	Failed    int `json:"failed_24h"`
	Discarded int `json:"discarded_24h"`
	Cancelled int `json:"cancelled_24h"`
}

// Throughput is the window's completions and enqueues per minute.
type Throughput struct {
	ProcessedPerMinute float64 `json:"processed_per_minute"`
	EnqueuedPerMinute  float64 `json:"enqueued_per_minute"`
}

// Stats reads tenant id's use at now: an ojserr not-found error for a
// tenant that never had a job.
func (r *Registry) Stats(ctx context.Context, ev EventLog, id string, now time.Time) (*Stats, error) {
	in, err := r.Get(ctx, id)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	if in == nil {
		return nil, ojserr.NotFoundf("tenant", id)
	}
	st := &Stats{TenantID: id, Queues: in.Queues, Window: "PT24H", FirstSeenAt: in.FirstSeen, Limits: map[string]LimitUse{}}
	if c := in.Limits.MaxConcurrency; c != nil {
		use := LimitUse{Limit: *c}
		if k, err := ratelimit.New(r.db, r.table).Get(ctx, ConcurrencyKey(id)); err == nil {
			use.Current = len(k.Slots)
		} else if !errors.Is(err, ratelimit.ErrNotFound) {
			return nil, ojserr.Backend(err)
		}
		st.Limits["max_concurrency"] = use
	}
	for _, q := range in.Queues {
		n, err := r.Available(ctx, id, q)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		st.Jobs.Available += n
	}
	counts := map[string]*int{events.JobEnqueued: &st.Jobs.Enqueued, events.JobStarted: &st.Jobs.Started, events.JobCompleted: &st.Jobs.Completed,
		events.JobFailed: &st.Jobs.Failed, events.JobDiscarded: &st.Jobs.Discarded, events.JobCancelled: &st.Jobs.Cancelled}
	f := events.Filter{Tenant: id, Since: now.Add(-StatsWindow), Limit: events.MaxLimit}
	for page := 0; ; page++ {
		if page == maxStatsPages {
			st.Truncated = true
			break
		}
		p, err := ev.QueryEvents(ctx, f, now)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		for _, e := range p.Events {
			if c := counts[e.Type]; c != nil {
				*c++
			}
		}
		if !p.HasMore {
			break
		}
		f.After = p.Cursor
	}
	st.TotalJobs = st.Jobs.Enqueued
	minutes := StatsWindow.Minutes()
	st.Throughput = Throughput{ProcessedPerMinute: float64(st.Jobs.Completed) / minutes, EnqueuedPerMinute: float64(st.Jobs.Enqueued) / minutes}
	return st, nil
}

// Available counts the tenant's available pull-mode jobs of queue (its
// tenant-index entries; discarded ones left it).
func (r *Registry) Available(ctx context.Context, id, queue string) (int, error) {
	counts, err := store.EachShard(ctx, store.TenantKeys(id, queue), func(ctx context.Context, pk string) (int, error) {
		return store.CountAll(ctx, r.db, &dynamodb.QueryInput{TableName: &r.table, IndexName: aws.String(topology.IndexTenant),
			KeyConditionExpression: aws.String("tn_pk = :pk"), ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS(pk)}})
	})
	n := 0
	for _, c := range counts {
		n += c
	}
	return n, err
}
