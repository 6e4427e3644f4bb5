package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// Multi-tenancy end to end on the local stack: requests with X-OJS-Tenant
// create the tenant's jobs and workflows and see or change only those;
// a scoped FETCH takes only the tenant's jobs; the tenant's stats, the
// registry and the scoped events API follow from the jobs' events.
func TestTenantsEndToEnd(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t)
	a, b := "acme-"+strings.ReplaceAll(q, "_", "-"), "beta-"+strings.ReplaceAll(q, "_", "-")
	as := func(tenant string) []string { return []string{"X-OJS-Tenant", tenant} }
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339Nano)
	enqueue := func(tenant string, n int) []string {
		var ids []string
		for i := range n {
			r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "t.e2e", "args": []any{i}, "options": map[string]any{"queue": q}}, as(tenant)...)
			j := r.job(t)
			if r.Status != http.StatusCreated || j["meta"].(map[string]any)["tenant_id"] != tenant {
				t.Fatalf("enqueue as %s: %d %s", tenant, r.Status, r.Raw)
			}
			ids = append(ids, j["id"].(string))
		}
		return ids
	}
	bIDs := enqueue(b, 5)
	aIDs := enqueue(a, 2)
	// By id, another tenant's job is not there.
	if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+aIDs[0], nil, as(b)...); r.Status != http.StatusNotFound {
		t.Fatalf("b reads a's job: %d", r.Status)
	}
	if r := do(t, http.MethodDelete, "/ojs/v1/jobs/"+aIDs[0], nil, as(b)...); r.Status != http.StatusNotFound {
		t.Fatalf("b cancels a's job: %d", r.Status)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+aIDs[0], nil, as(a)...); r.Status != http.StatusOK || r.job(t)["state"] != "available" {
		t.Fatalf("a reads its job: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "t", "args": []any{}, "meta": map[string]any{"tenant_id": b}}, as(a)...); r.Status != http.StatusBadRequest {
		t.Fatalf("a enqueues naming b in meta: %d", r.Status)
	}
	// a's FETCH takes a's two jobs, behind b's five.
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 10, "worker_id": "wa"}, as(a)...)
	got := r.Body["jobs"].([]any)
	if len(got) != 2 {
		t.Fatalf("a's FETCH: %d jobs %s", len(got), r.Raw)
	}
	for _, g := range got {
		if m := g.(map[string]any)["meta"].(map[string]any); m["tenant_id"] != a {
			t.Fatalf("a's FETCH got %v", m)
		}
	}
	// b cannot ACK a's job; a can.
	if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": aIDs[0], "worker_id": "wa"}, as(b)...); r.Status != http.StatusNotFound {
		t.Fatalf("b acks a's job: %d", r.Status)
	}
	for _, id := range aIDs {
		if r := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": id, "worker_id": "wa"}, as(a)...); r.Status != http.StatusOK {
			t.Fatalf("a acks: %d %s", r.Status, r.Raw)
		}
	}
	// A workflow created as a is a's, every job of it too.
	wq := q + "-wf"
	wr := do(t, http.MethodPost, "/ojs/v1/workflows", map[string]any{"type": "chain", "name": "t", "steps": []any{
		map[string]any{"type": "t.step", "args": []any{1}, "options": map[string]any{"queue": wq}},
		map[string]any{"type": "t.step", "args": []any{2}, "options": map[string]any{"queue": wq}}}}, as(a)...)
	if wr.Status != http.StatusCreated {
		t.Fatalf("workflow: %d %s", wr.Status, wr.Raw)
	}
	wf := wr.Body["workflow"].(map[string]any)
	if wf["tenant_id"] != a {
		t.Fatalf("workflow tenant: %v", wf["tenant_id"])
	}
	if r := do(t, http.MethodGet, "/ojs/v1/workflows/"+wf["id"].(string), nil, as(b)...); r.Status != http.StatusNotFound {
		t.Fatalf("b reads a's workflow: %d", r.Status)
	}
	// Its second step, started when the first completes, is a's as well:
	// a's FETCH (the tenant index) finds it.
	for step := 1; step <= 2; step++ {
		deadline := time.Now().Add(settle)
		var jobs []any
		for {
			r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{wq}, "worker_id": "wa"}, as(a)...)
			if jobs = r.Body["jobs"].([]any); len(jobs) == 1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(jobs) != 1 || num(jobs[0].(map[string]any)["args"].([]any)[0]) != step {
			t.Fatalf("a's FETCH of step %d: %v", step, jobs)
		}
		do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": jobs[0].(map[string]any)["id"], "worker_id": "wa"}, as(a)...)
	}
	// The workflow's events are a's too.
	wfEvents := func(tenant string) int {
		r := do(t, http.MethodGet, "/ojs/v1/events?types=workflow.completed&workflow_id="+wf["id"].(string), nil, as(tenant)...)
		return len(r.Body["events"].([]any))
	}
	deadline := time.Now().Add(settle)
	for wfEvents(a) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("a's workflow.completed not among a's events")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := wfEvents(b); n != 0 {
		t.Fatalf("b sees a's workflow events: %d", n)
	}
	// Stats, the registry and the scoped events follow.
	deadline = time.Now().Add(settle)
	var st response
	for {
		st = do(t, http.MethodGet, "/ojs/v1/admin/tenants/"+a+"/stats", nil)
		jobs, _ := st.Body["jobs"].(map[string]any)
		if st.Status == http.StatusOK && jobs != nil && num(jobs["completed_24h"]) == 4 && num(st.Body["total_jobs"]) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's stats: %d %s", st.Status, st.Raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
	bs := do(t, http.MethodGet, "/ojs/v1/admin/tenants/"+b+"/stats", nil)
	if jobs := bs.Body["jobs"].(map[string]any); num(jobs["available"]) != len(bIDs) {
		t.Fatalf("b's stats: %s", bs.Raw)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/queues/"+q, nil, as(b)...); num(r.Body["queue"].(map[string]any)["available"]) != len(bIDs) {
		t.Fatalf("b's view of the queue: %s", r.Raw)
	}
	list := do(t, http.MethodGet, "/ojs/v1/admin/tenants", nil)
	if !strings.Contains(string(list.Raw), `"`+a+`"`) || !strings.Contains(string(list.Raw), `"`+b+`"`) {
		t.Fatalf("tenants: %s", list.Raw)
	}
	evs := do(t, http.MethodGet, "/ojs/v1/events?types=job.completed&since="+since+"&limit=1000", nil, as(b)...)
	if n := len(evs.Body["events"].([]any)); evs.Status != http.StatusOK || n != 0 {
		t.Fatalf("b's events hold a's completions: %d %s", n, evs.Raw)
	}
	if page := do(t, http.MethodGet, "/ojs/admin/tenants", nil); page.Status != http.StatusOK || !strings.Contains(string(page.Raw), `<td class="mono">`+a+`</td>`) {
		t.Fatalf("console tenants page: %d %.400s", page.Status, page.Raw)
	}
	// A limit: a's max_concurrency, in its stats with its use.
	if r := do(t, http.MethodPut, "/ojs/v1/admin/tenants/"+a+"/limits", map[string]any{"max_concurrency": 1}); r.Status != http.StatusOK ||
		num(r.Body["tenant"].(map[string]any)["limits"].(map[string]any)["max_concurrency"]) != 1 {
		t.Fatalf("set a's limits: %d %s", r.Status, r.Raw)
	}
	lim := do(t, http.MethodGet, "/ojs/v1/admin/tenants/"+a+"/stats", nil).Body["limits"].(map[string]any)
	if mc, _ := lim["max_concurrency"].(map[string]any); mc == nil || num(mc["limit"]) != 1 {
		t.Fatalf("a's stats' limits: %v", lim)
	}
	// Per-tenant metrics (MT-006).
	m := do(t, http.MethodGet, "/metrics", nil)
	for _, want := range []string{`ojs_tenant_jobs_available{tenant_id="` + a + `",queue="` + q + `"} `, `ojs_tenant_jobs_active{tenant_id="` + a + `"} `} {
		if m.Status != http.StatusOK || !strings.Contains(string(m.Raw), want) {
			t.Fatalf("/metrics lacks %s: %d", want, m.Status)
		}
	}
	// An enqueue rate: a new tenant (no process has its limits cached)
	// limited to one job an hour is refused its second.
	c := a + "-rate"
	if r := do(t, http.MethodPut, "/ojs/v1/admin/tenants/"+c+"/limits", map[string]any{"max_enqueue_rate": map[string]any{"limit": 1, "period": "PT1H"}}); r.Status != http.StatusOK {
		t.Fatalf("set %s's enqueue rate: %d %s", c, r.Status, r.Raw)
	}
	for i, want := range []int{http.StatusCreated, http.StatusTooManyRequests} {
		r := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "t.rate", "args": []any{i}, "options": map[string]any{"queue": q}}, as(c)...)
		e, _ := r.Body["error"].(map[string]any)
		if r.Status != want || (want == http.StatusTooManyRequests && (e["code"] != "TENANT_LIMIT_EXCEEDED" || r.Header.Get("Retry-After") == "")) {
			t.Fatalf("%s's enqueue %d: %d %v %s", c, i, r.Status, r.Header, r.Raw)
		}
	}
	if r := do(t, http.MethodPut, "/ojs/v1/admin/tenants/"+c+"/limits", map[string]any{"max_queue_depth": 10}); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("max_queue_depth: %d %s", r.Status, r.Raw)
	}
	// The dead letter: a's failed job is a's alone; bulk operations and
	// statistics over every tenant's jobs are refused to a scoped request.
	dq := q + "-dead"
	dj := do(t, http.MethodPost, "/ojs/v1/jobs", map[string]any{"type": "t.dead", "args": []any{}, "options": map[string]any{"queue": dq, "retry": map[string]any{"max_attempts": 1}}}, as(a)...).job(t)
	fr := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{dq}, "worker_id": "wa"}, as(a)...)
	if len(fr.Body["jobs"].([]any)) != 1 {
		t.Fatalf("fetch of the job to fail: %s", fr.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": dj["id"], "worker_id": "wa", "error": map[string]any{"type": "fatal", "message": "no", "retryable": false}}, as(a)...); r.Status != http.StatusOK {
		t.Fatalf("nack: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/dead-letter/"+dj["id"].(string), nil, as(b)...); r.Status != http.StatusNotFound {
		t.Fatalf("b reads a's dead job: %d", r.Status)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/dead-letter/"+dj["id"].(string), nil, as(a)...); r.Status != http.StatusOK {
		t.Fatalf("a reads its dead job: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/dead-letter?queue="+dq, nil, as(b)...); len(r.Body["jobs"].([]any)) != 0 {
		t.Fatalf("b lists a's dead job: %s", r.Raw)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/"+dj["id"].(string)+"/retry", map[string]any{}, as(b)...); r.Status != http.StatusNotFound {
		t.Fatalf("b retries a's dead job: %d", r.Status)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/dead-letter/retry", map[string]any{"filter": map[string]any{"queue": dq}, "confirm": true}, as(b)...); r.Status != http.StatusBadRequest {
		t.Fatalf("a scoped bulk retry: %d %s", r.Status, r.Raw)
	}
	// Tenant fairness is a queue's configuration.
	if r := do(t, http.MethodPut, "/ojs/v1/admin/queues/"+q+"/config", map[string]any{"tenant_fairness": "round-robin"}); r.Status != http.StatusOK ||
		!strings.Contains(string(r.Raw), `"tenant_fairness":"round-robin"`) {
		t.Fatalf("tenant fairness: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodPut, "/ojs/v1/admin/queues/"+q+"/config", map[string]any{"tenant_fairness": "lottery"}); r.Status != http.StatusBadRequest {
		t.Fatalf("an unknown fairness: %d", r.Status)
	}
	if r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 2, "worker_id": "shared"}); len(r.Body["jobs"].([]any)) != 2 {
		t.Fatalf("an unscoped FETCH of a shared queue: %s", r.Raw)
	}
	if r := do(t, http.MethodGet, "/ojs/v1/admin/tenants/nobody-"+a+"/stats", nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown tenant: %d", r.Status)
	}
}
