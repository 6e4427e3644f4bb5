package console

import (
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// Every value a user or a worker controls (types, queue names, error
// messages, worker ids, flash text, form values) is written escaped on
// every page, text and attributes alike.
func TestViewsEscapeEveryValue(t *testing.T) {
	const evil = `"><script>alert(1)</script><x y='`
	now := time.Now()
	j := &job.Job{ID: "0195" + evil, Type: evil, Queue: evil, State: job.Discarded, WorkflowID: evil, WorkflowNode: evil, WorkerID: evil,
		Error: &job.ErrorInfo{Type: evil, Message: evil}, DiscardedAt: &now, Progress: &job.Progress{Message: evil, UpdatedAt: evil}}
	one := 1
	pages := map[string]page{
		"job": {Title: evil, Flash: evil, Error: evil, Data: &jobData{Job: j, Envelope: map[string]any{"k": evil},
			Events: []events.Event{{Type: evil, Time: evil, Data: map[string]any{"x": evil}}}, Errors: []job.ErrorInfo{{Type: evil, Message: evil, OccurredAt: evil}}}},
		"dashboard": {Data: &dashboardData{Stats: &admin.Stats{ComputedAt: evil}, History: &admin.History{},
			Queues: []admin.Queue{{Name: evil, State: evil, Mode: evil, Bound: &queue.Bound{MaxDepth: 10}}}}},
		"jobs": {Data: &jobsData{Query: map[string][]string{"type": {evil}, "since": {evil}, "queue": {evil}}, Queues: []string{evil}, States: job.States,
			Page:    &admin.JobPage{Items: []map[string]any{{"id": evil, "type": evil, "queue": evil, "state": evil, "created_at": evil, "completed_at": evil}}},
			NextURL: Prefix + evil, SearchNote: evil}},
		"deadletter": {Data: &deadData{List: &admin.DeadList{Pagination: admin.Pagination{Total: &one}}, Queue: evil, NextURL: Prefix + evil}},
		"workers":    {Data: &admin.WorkerList{Items: []admin.Worker{{WorkerInfo: queue.WorkerInfo{ID: evil, State: evil, Directive: evil, Hostname: evil, Queues: []string{evil}}}}}},
		"cron":       {Data: []cron.View{{Name: evil, Expression: evil, Timezone: evil, OverlapPolicy: evil, LastJobID: ptr(evil), NextRunAt: ptr(evil)}}},
		"webhooks":   {Data: &webhooksData{Subs: []webhook.Subscription{{ID: evil, URL: evil, Events: []string{evil}, UpdatedAt: evil}}}},
		"workflows":  {Data: []admin.WorkflowRef{{ID: evil, Type: evil, Name: evil, CreatedAt: evil}}},
		"workflow":   {Data: &workflowData{ID: evil, State: evil, View: &wfview.View{ViewNode: wfview.ViewNode{Type: evil, Name: evil}, Metadata: wfview.ViewMetadata{CreatedAt: evil}}}},
		"login":      {Data: map[string]any{"Next": evil}},
	}
	for name, p := range pages {
		var b Builder
		pageLayout(&b, p, views[name])
		out := b.String()
		if strings.Contains(out, "<script>") || strings.Contains(out, "<x y=") {
			t.Errorf("%s: a value was written unescaped:\n%s", name, out)
		}
		if !strings.Contains(out, "&lt;script&gt;") {
			t.Errorf("%s: the value is missing from the page", name)
		}
	}
}

func ptr(s string) *string { return &s }

// A job's page shows its reported progress as a bar; a completed job's
// shows it full.
func TestJobPageShowsProgress(t *testing.T) {
	v := 0.4
	for _, c := range []struct {
		state job.State
		want  string
	}{{job.Active, `<progress value="0.4" max="1"></progress> 40% rows`}, {job.Completed, `<progress value="1" max="1"></progress> 100% rows`}} {
		j := &job.Job{ID: "01", State: c.state, Progress: &job.Progress{Value: &v, Message: "rows", UpdatedAt: "2026-11-28T10:00:00.000Z"}}
		var b Builder
		jobView(&b, page{Data: &jobData{Job: j}})
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%s job page lacks %q:\n%s", c.state, c.want, b.String())
		}
	}
}

// A job that needs a kind of worker says which on its page.
func TestJobPageShowsNeeds(t *testing.T) {
	e, err := job.ParseEnqueue([]byte(`{"type":"ml.train","args":[],"ext_ml_gpu_count":4,"ext_ml_gpu_type":"nvidia-a100","ext_ml_gpu_memory_gb":80,
		"ext_ml_memory_gb":256,"ext_ml_node_affinity":{"required":[{"key":"zone","operator":"In","values":["b"]}]}}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var b Builder
	jobView(&b, page{Data: &jobData{Job: e.Job}})
	want := "Runs on a worker with 4 × nvidia-a100 GPU, 80 GB each; 256 GB memory; label zone In [b]"
	if !strings.Contains(b.String(), want) {
		t.Errorf("job page lacks %q:\n%s", want, b.String())
	}
	b = Builder{}
	jobView(&b, page{Data: &jobData{Job: &job.Job{ID: "01", State: job.Available}}})
	if strings.Contains(b.String(), "Runs on a worker") {
		t.Errorf("a job that needs nothing shows needs:\n%s", b.String())
	}
}

// The dashboard shows a bounded queue's depth against its bound.
func TestDashboardShowsABoundedQueue(t *testing.T) {
	q := admin.Queue{Name: "mail", State: "active", Mode: "pull", Counts: admin.Counts{Available: 2, Scheduled: 1, Active: 5}, Bound: &queue.Bound{MaxDepth: 10}}
	var b Builder
	pageLayout(&b, page{Data: &dashboardData{Stats: &admin.Stats{}, History: &admin.History{}, Queues: []admin.Queue{q, {Name: "free"}}}}, views["dashboard"])
	if out := b.String(); !strings.Contains(out, `3 / 10 <progress value="3" max="10">`) || strings.Count(out, `class="muted bound"`) != 1 {
		t.Errorf("the dashboard does not show the bound of queue mail alone:\n%s", out)
	}
}

// A keyed job's page shows its rate limit key's limits and use.
func TestJobPageShowsRateLimitKey(t *testing.T) {
	j := &job.Job{ID: "01", State: job.Available, KeyLimit: &job.KeyLimit{Key: "stripe-api"}}
	in := &ratelimit.Info{Key: "stripe-api", Concurrency: &ratelimit.ConcurrencyUse{Limit: 5, Active: 3, Available: 2},
		Rate: &ratelimit.RateUse{Limit: 100, Period: "PT1M", CurrentCount: 47, WindowResetsAt: "2026-11-29T12:01:00.000Z"}}
	var b Builder
	jobView(&b, page{Data: &jobData{Job: j, Key: in}})
	for _, want := range []string{`Rate limit key <span class="mono">stripe-api</span>`, `concurrency 3 / 5 active <progress value="3" max="5">`, `rate 47 / 100 per PT1M`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("job page lacks %q:\n%s", want, b.String())
		}
	}
}

// Every verb of a view's format escapes its value and prints it as the
// verb says (a number under %d was once printed "%!d(string=...)").
func TestBuilderEscapesEveryVerb(t *testing.T) {
	var b Builder
	b.f("%d ms · %v · %s · %.1f · %q", 10000, true, "<b>", 0.25, "x")
	if got, want := b.String(), `10000 ms · true · &lt;b&gt; · 0.2 · &#34;x&#34;`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// The tenants page shows each tenant's counts.
func TestTenantsPage(t *testing.T) {
	d := &tenantsData{Total: 2, Stats: []*tenant.Stats{{TenantID: "acme", Queues: []string{"a", "b"}, FirstSeenAt: "2026-11-29T10:00:00.000Z",
		Jobs: tenant.Counts{Available: 4, Enqueued: 9, Completed: 5}}}}
	var b Builder
	tenantsView(&b, page{Data: d})
	for _, want := range []string{`<td class="mono">acme</td><td>a, b</td><td>4</td><td>9</td><td>0</td><td>5</td>`, "2 tenants; the first 1 by id"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tenants page lacks %q:\n%s", want, b.String())
		}
	}
}

// The rate limits page shows each key's use, its override and hold, and
// the stop and remove actions.
func TestRateLimitsPage(t *testing.T) {
	kp := &queue.KeyPage{Items: []ratelimit.Info{
		{Key: "stripe", Concurrency: &ratelimit.ConcurrencyUse{Limit: 0, Active: 2}, Override: &ratelimit.OverrideInfo{Active: true, ExpiresAt: "2026-11-29T11:00:00.000Z"},
			Dynamic: &ratelimit.DynamicHold{Until: "2026-11-29T10:05:00.000Z"}},
		{Key: "mail", Rate: &ratelimit.RateUse{Limit: 100, Period: "PT1M", CurrentCount: 7}}}}
	kp.Pagination.Total = 3
	var b Builder
	rateLimitsView(&b, page{Data: &rateLimitsData{Page: kp}})
	for _, want := range []string{`<td class="mono">stripe</td><td>2 / 0</td><td>–</td><td>–</td><td>until 2026-11-29T11:00:00.000Z</td><td>2026-11-29T10:05:00.000Z</td>`,
		`action="/ojs/admin/rate-limits/stripe/clear"`, `<td class="mono">mail</td><td>–</td><td>7 / 100 per PT1M</td>`,
		`action="/ojs/admin/rate-limits/mail/stop"`, "3 keys; the first 2 are shown"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("rate limits page lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "rate-limits/mail/clear") {
		t.Error("a key without an override offers to remove one")
	}
}
