package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The web console in a real browser: Debian's headless Chromium, driven
// through the DevTools protocol (e2e/cdp_test.go). `make test` installs
// Chromium when it is missing (make chromium); without it these tests
// fail and say how to install it. OJS_CONSOLE_SCREENSHOTS=<dir> also
// writes the dashboard and a workflow page as PNG there (docs/ holds the
// ones the README shows).
//
// Against a deployment (OJS_BASE_URL) they run only when asked with
// OJS_E2E_BROWSER=1 (make test-e2e BROWSER=1): the machine running the
// suite may have no Chromium, and the browser sends its requests unsigned,
// so only a bearer-token deployment (a JWT stage, LocalStack) answers it.

// wantBrowser skips a console test against a deployment unless
// OJS_E2E_BROWSER asks for it; the local stack always runs it.
func wantBrowser(t *testing.T) {
	t.Helper()
	if rt != nil {
		return
	}
	if on, _ := strconv.ParseBool(os.Getenv("OJS_E2E_BROWSER")); !on {
		t.Skip("browser test against a deployment: set OJS_E2E_BROWSER=1 (make test-e2e BROWSER=1) to run it; it needs Chromium and a bearer-token stage")
	}
	if signed {
		t.Fatal("OJS_E2E_BROWSER=1, but this stage's requests are signed with SigV4 and the browser cannot sign them: " +
			"run the browser tests against a JWT stage (OJS_AUTH_TOKEN) or LocalStack")
	}
}

func browser(t *testing.T) (*cdpPage, context.Context) {
	t.Helper()
	bin, err := findChromium()
	if err != nil {
		t.Fatalf("the console tests need Chromium: %v", err)
	}
	b, err := launchChromium(bin, 1400, 900)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), settle+time.Minute)
	t.Cleanup(cancel)
	var headers map[string]string
	if authToken != "" {
		headers = map[string]string{"Authorization": "Bearer " + authToken}
	}
	p, err := b.NewPage(ctx, headers)
	if err != nil {
		t.Fatal(err)
	}
	return p, ctx
}

func open(t *testing.T, ctx context.Context, p *cdpPage, path string) {
	t.Helper()
	if err := p.Navigate(ctx, baseURL+path); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, p *cdpPage, expr string) T {
	t.Helper()
	var v T
	if err := p.Eval(ctx, expr, &v); err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// graphStates reads every graph node's data-step-id and data-state from
// the page as it is now (the page refreshes itself; it is not reloaded).
const graphStates = `Object.fromEntries(Array.from(document.querySelectorAll("svg.wf-graph [data-step-id]")).map(e => [e.dataset.stepId, e.dataset.state]))`

// waitGraph waits until the open page's graph shows node id in state.
func waitGraph(t *testing.T, ctx context.Context, p *cdpPage, id, state string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(settle)
	var last map[string]string
	for time.Now().Before(deadline) {
		if err := p.Eval(ctx, graphStates, &last); err == nil && last[id] == state {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the graph did not show %s %s within %v; last: %v", id, state, settle, last)
	return nil
}

// waitJobNode waits until the node of job jid shows state, and returns
// the node's step id.
func waitJobNode(t *testing.T, ctx context.Context, p *cdpPage, jid, state string) string {
	t.Helper()
	deadline := time.Now().Add(settle)
	var last [2]string
	expr := fmt.Sprintf(`(e => e ? [e.dataset.stepId, e.dataset.state] : ["", ""])(document.querySelector('svg.wf-graph [data-job-id=%q]'))`, jid)
	for time.Now().Before(deadline) {
		if err := p.Eval(ctx, expr, &last); err == nil && last[1] == state {
			return last[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the graph did not show job %s %s within %v; last: %v", jid, state, settle, last)
	return ""
}

// viewStates is what the graph must show for a workflow view: each step's
// state under its id, or its engine path when it has none (the console's
// rule, docs/admin.md).
func viewStates(v map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(m map[string]any, path string)
	walk = func(m map[string]any, path string) {
		id, _ := m["id"].(string)
		if id == "" {
			id = path
		}
		out[id], _ = m["state"].(string)
		join := func(seg string) string {
			if path == "/" {
				return "/" + seg
			}
			return path + "/" + seg
		}
		for _, f := range []struct{ key, seg string }{{"steps", "s"}, {"jobs", "j"}} {
			l, _ := m[f.key].([]any)
			for i, x := range l {
				if c, ok := x.(map[string]any); ok {
					walk(c, join(fmt.Sprintf("%s%d", f.seg, i)))
				}
			}
		}
		cbs, _ := m["callbacks"].(map[string]any)
		for name, x := range cbs {
			if c, ok := x.(map[string]any); ok {
				walk(c, join(name))
			}
		}
	}
	walk(v, "/")
	return out
}

// firstStep is the step that is pending before anything ran.
func firstStep(states map[string]string) string {
	for id, st := range states {
		if st == "pending" {
			return id
		}
	}
	return ""
}

func screenshot(t *testing.T, ctx context.Context, p *cdpPage, name string) {
	dir := os.Getenv("OJS_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := p.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleWorkflowGraphLive opens a running workflow (a chain of a job,
// a group, and a batch holding a nested chain, with a callback) and works
// its jobs one at a time as a pull worker: after each FETCH and each ACK
// the open page, which is never reloaded, must show that step's new
// state. Each node links to its job's page.
func TestConsoleWorkflowGraphLive(t *testing.T) {
	wantBrowser(t)
	t.Parallel()
	q := uniqueQueue(t)
	opt := fmt.Sprintf(`"args":[],"options":{"queue":%q}`, q)
	wf := createWorkflow(t, `{"type":"chain","name":"console-e2e","steps":[
		{"type":"data.extract",`+opt+`},
		{"type":"group","name":"transform","jobs":[{"type":"transform.csv",`+opt+`},{"type":"transform.json",`+opt+`}]},
		{"type":"batch","name":"load","jobs":[{"type":"load.warehouse",`+opt+`},
			{"type":"chain","name":"index","steps":[{"type":"index.build",`+opt+`},{"type":"index.publish",`+opt+`}]}],
		 "callbacks":{"on_success":{"type":"notify.done",`+opt+`}}}]}`)
	id := wf["id"].(string)
	// The workflow's queue is registered like a pushed job's.
	if r := do(t, http.MethodGet, "/ojs/v1/admin/queues/"+q, nil); r.Status != 200 || r.Body["name"] != q {
		t.Errorf("the workflow's queue is not listed: %d %s", r.Status, r.Raw)
	}
	p, ctx := browser(t)
	open(t, ctx, p, "/ojs/admin/workflows/"+id)

	// Every step of every kind is drawn, in the state the API reports.
	want := viewStates(do(t, http.MethodGet, "/ojs/v1/workflows/"+id, nil).Body["workflow"].(map[string]any))
	got := waitGraph(t, ctx, p, firstStep(want), "pending")
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) != 11 {
		t.Errorf("before any job ran:\n graph %v\n   API %v", got, want)
	}

	// Work the jobs one at a time; the graph follows each change. A node
	// is found by its job (data-job-id), whatever its step id.
	done := map[string]string{}
	deadline := time.Now().Add(settle)
	for n := 0; len(done) < 7; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("jobs done: %v", done)
		}
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 1, "worker_id": "console-e2e"})
		jobs, _ := r.Body["jobs"].([]any)
		if len(jobs) == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		jid := jobs[0].(map[string]any)["id"].(string)
		step := waitJobNode(t, ctx, p, jid, "active")
		if len(done) == 3 {
			screenshot(t, ctx, p, "console-workflow.png")
		}
		// The node links to its job's page.
		href := eval[string](t, ctx, p, fmt.Sprintf(`document.querySelector('[data-job-id=%q] a').getAttribute("href")`, jid))
		if href != "/ojs/admin/jobs/"+jid {
			t.Errorf("node %s links to %q, want its job %s", step, href, jid)
		}
		if a := do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": jid, "result": map[string]any{"n": n}}); a.Status != 200 {
			t.Fatalf("ack: %d %s", a.Status, a.Raw)
		}
		waitJobNode(t, ctx, p, jid, "completed")
		done[step] = jid
	}
	final := waitGraph(t, ctx, p, id, "completed")
	if len(final) != len(want) {
		t.Errorf("nodes at the end: %v", final)
	}
	for k, v := range final {
		if v != "completed" {
			t.Errorf("after the workflow finished, node %s is %s", k, v)
		}
	}
	// A finished workflow stops refreshing.
	if s := eval[string](t, ctx, p, `document.querySelector("[data-live]").dataset.final + " " + document.getElementById("wf-state").dataset.state`); s != "true completed" {
		t.Errorf("final marker: %q", s)
	}
	// The job page of a step: its envelope, state and events.
	var jsonJob string
	for _, jid := range done {
		if j := do(t, http.MethodGet, "/ojs/v1/jobs/"+jid, nil).job(t); j["type"] == "transform.json" {
			jsonJob = jid
		}
	}
	open(t, ctx, p, "/ojs/admin/jobs/"+jsonJob)
	page := eval[string](t, ctx, p, `document.getElementById("content").innerText`)
	for _, s := range []string{jsonJob, "transform.json", "completed", "job.completed", id} {
		if !strings.Contains(page, s) {
			t.Errorf("job page lacks %q:\n%s", s, page)
		}
	}
}

// TestConsoleDashboardAndDeadLetter opens the dashboard (the queue with
// its counts) and the dead letter page, and retries then deletes a dead
// job with the page's buttons.
func TestConsoleDashboardAndDeadLetter(t *testing.T) {
	wantBrowser(t)
	t.Parallel()
	q := uniqueQueue(t) + "-dl"
	id := func() string {
		push(t, map[string]any{"type": "console.fail", "args": []any{}, "options": map[string]any{"queue": q, "retry": map[string]any{"max_attempts": 1}}})
		r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 1})
		jobs, _ := r.Body["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("fetch: %s", r.Raw)
		}
		id := jobs[0].(map[string]any)["id"].(string)
		do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "error": map[string]any{"type": "BoomError", "message": "boom"}})
		waitFor(t, id, "discarded")
		return id
	}()
	push(t, map[string]any{"type": "console.wait", "args": []any{}, "options": map[string]any{"queue": q}})
	p, ctx := browser(t)

	open(t, ctx, p, "/ojs/admin/")
	row := eval[[]string](t, ctx, p, fmt.Sprintf(`Array.from(document.querySelectorAll('tr[data-queue=%q] td')).map(td => td.innerText.trim())`, q))
	// queue, mode, status, available, active, scheduled, retryable, completed, dead, ...
	if len(row) < 9 || row[0] != q || row[1] != "pull" || row[3] != "1" || row[8] != "1" {
		t.Errorf("dashboard row of %s: %v", q, row)
	}
	if n := eval[int](t, ctx, p, `document.querySelectorAll("svg.chart polyline").length`); n != 3 {
		t.Errorf("throughput chart has %d series", n)
	}
	screenshot(t, ctx, p, "console-dashboard.png")

	open(t, ctx, p, "/ojs/admin/dead-letter?queue="+q)
	submit := func(action string) {
		t.Helper()
		ok := eval[bool](t, ctx, p, fmt.Sprintf(`(() => { const f = document.querySelector('tr[data-job-id=%q] form[action$=%q]'); if (!f) return false; f.submit(); return true })()`, id, action))
		if !ok {
			t.Fatalf("no %s button for %s on %s", action, id, eval[string](t, ctx, p, `document.body.innerText`))
		}
		// The post redirects to a page with a flash message.
		deadline := time.Now().Add(settle)
		for eval[string](t, ctx, p, `(document.querySelector(".flash") || {}).innerText || ""`) == "" {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no confirmation; page: %s", action, eval[string](t, ctx, p, `document.body.innerText`))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	submit("/retry")
	if j := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil).job(t); j["state"] != "available" || num(j["attempt"]) != 0 {
		t.Fatalf("after Retry: %v", j)
	}
	// Fail it again (and complete the other job), find both with the job
	// search (index and event log), and delete the dead one from the page.
	r := do(t, http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "count": 2})
	for _, x := range r.Body["jobs"].([]any) {
		jid := x.(map[string]any)["id"].(string)
		if jid == id {
			do(t, http.MethodPost, "/ojs/v1/workers/nack", map[string]any{"job_id": id, "error": map[string]any{"type": "BoomError", "message": "again"}})
		} else {
			do(t, http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": jid, "result": nil})
		}
	}
	waitFor(t, id, "discarded")
	search := func(query, want string) {
		t.Helper()
		deadline := time.Now().Add(settle)
		var cells []string
		for {
			open(t, ctx, p, "/ojs/admin/jobs?"+query)
			if err := p.Eval(ctx, `Array.from(document.querySelectorAll("tbody tr td:nth-child(2)")).map(td => td.innerText)`, &cells); err == nil && len(cells) == 1 && cells[0] == want {
				return
			}
			if time.Now().After(deadline) {
				b, _ := json.Marshal(cells)
				t.Fatalf("job search %s: %s", query, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	search("state=discarded&queue="+q, "console.fail")
	search("state=completed&queue="+q, "console.wait")
	open(t, ctx, p, "/ojs/admin/dead-letter?queue="+q)
	submit("/delete")
	if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+id, nil); r.Status != http.StatusNotFound {
		t.Fatalf("after Delete: %d %s", r.Status, r.Raw)
	}
}
