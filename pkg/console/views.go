package console

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/url"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
)

// The pages are written by Go code rather than text/template: a template
// engine evaluates fields by reflection, which makes the linker keep every
// exported method of every type in the api function (18 MB instead of
// 12.7 MB for linux/arm64). Every value goes through one of two doors:
// Builder.f escapes each argument for HTML text and quoted attributes,
// and only SafeHTML (the SVG charts and graphs, escaped where they are
// built) is written as is.

// SafeHTML is markup that is already safe to write as is.
type SafeHTML string

// Builder accumulates a page.
type Builder struct{ strings.Builder }

// f writes format with each argument escaped for HTML (text and quoted
// attribute values alike), whatever its verb; SafeHTML arguments are
// written as they are.
func (b *Builder) f(format string, args ...any) {
	esc := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(SafeHTML); ok {
			esc[i] = string(s)
			continue
		}
		esc[i] = escaped{a}
	}
	fmt.Fprintf(b, format, esc...)
}

// escaped formats its value with the verb it is given, escaped for HTML.
type escaped struct{ v any }

func (e escaped) Format(f fmt.State, verb rune) {
	_, _ = io.WriteString(f, html.EscapeString(fmt.Sprintf(fmt.FormatString(f, verb), e.v)))
}

// raw writes trusted constant markup.
func (b *Builder) raw(s string) { b.WriteString(s) }

// none writes a table's row saying msg (constant text) when it has no rows (n).
func (b *Builder) none(n int, indent string, cols int, msg string) {
	if n == 0 {
		b.raw(fmt.Sprintf(`%s<tr><td colspan="%d" class="muted">%s</td></tr>`+"\n", indent, cols, msg))
	}
}

// table writes a table's head (cols: constant text) and returns what ends
// it: a row saying none (constant text) when it has no rows (n), and the
// closing tags.
func (b *Builder) table(cols ...string) func(n int, none string) {
	b.raw("<table>\n  <thead><tr><th>" + strings.Join(cols, "</th><th>") + "</th></tr></thead>\n  <tbody>\n")
	return func(n int, none string) {
		b.none(n, "    ", len(cols), none)
		b.raw("  </tbody>\n</table>\n")
	}
}

// next writes the link to the next page, if there is one.
func (b *Builder) next(url string) {
	if url != "" {
		b.f("<p><a class=\"button\" href=\"%s\">Next page</a></p>\n", url)
	}
}

// when returns s if cond holds, else "" (for constant markup).
func when(cond bool, s string) SafeHTML {
	if cond {
		return SafeHTML(s)
	}
	return ""
}

// deref prints a *string as its value ("" for nil).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func shortID(s string) string {
	if len(s) > 13 {
		return s[:8] + "…" + s[len(s)-4:]
	}
	return s
}

func jsonText(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// views are the pages' contents by name.
var views = map[string]func(*Builder, page){
	"dashboard":  dashboardView,
	"jobs":       jobsView,
	"job":        jobView,
	"deadletter": deadLetterView,
	"workers":    workersView,
	"cron":       cronView,
	"webhooks":   webhooksView,
	"tenants":    tenantsView,
	"ratelimits": rateLimitsView,
	"workflows":  workflowsView,
	"workflow":   workflowView,
	"login":      loginView,
	"error":      errorView,
}

// pageLayout writes the whole page around its content.
func pageLayout(b *Builder, p page, content func(*Builder, page)) {
	b.f(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%s · OJS console</title>
<link rel="stylesheet" href="/ojs/admin/static/console.css">
<script src="/ojs/admin/static/console.js" defer></script>
</head>
<body>
<header class="top">
  <a class="brand" href="/ojs/admin/">OJS<span> console</span></a>
  <nav>
`, p.Title)
	for _, n := range []struct{ href, nav, label string }{
		{"/ojs/admin/", "dashboard", "Dashboard"}, {"/ojs/admin/jobs", "jobs", "Jobs"}, {"/ojs/admin/workflows", "workflows", "Workflows"},
		{"/ojs/admin/dead-letter", "dead-letter", "Dead letter"}, {"/ojs/admin/workers", "workers", "Workers"}, {"/ojs/admin/cron", "cron", "Cron"},
		{"/ojs/admin/webhooks", "webhooks", "Webhooks"},
		{"/ojs/admin/tenants", "tenants", "Tenants"}, {"/ojs/admin/rate-limits", "rate-limits", "Rate limits"},
	} {
		b.f("    <a href=\"%s\" %s>%s</a>\n", n.href, when(p.Nav == n.nav, `class="on"`), n.label)
	}
	b.raw("  </nav>\n")
	if p.Auth {
		b.raw(`  <form method="post" action="/ojs/admin/logout" class="logout"><button>Sign out</button></form>` + "\n")
	}
	b.raw("</header>\n")
	if p.Flash != "" {
		b.f("<p class=\"flash\">%s</p>\n", p.Flash)
	}
	if p.Error != "" {
		b.f("<p class=\"error\">%s</p>\n", p.Error)
	}
	b.raw(`<main id="content">`)
	content(b, p)
	b.raw(`</main>
<footer>ojs-serverless · <a href="/ojs/manifest">manifest</a> · <a href="/ojs/v1/admin/stats">Admin API</a> · <a href="/metrics">metrics</a></footer>
</body>
</html>
`)
}

func dashboardView(b *Builder, p page) {
	b.raw(`<div data-live="/ojs/admin/fragments/dashboard" data-interval="5000" data-final="false"></div>` + "\n")
	d, _ := p.Data.(*dashboardData)
	if d == nil {
		return
	}
	s := d.Stats
	b.f(`<section class="tiles">
  <div class="tile"><b>%v</b><span>queues</span></div>
  <div class="tile"><b>%v</b><span>workers</span></div>
  <div class="tile state-available"><b>%v</b><span>available</span></div>
  <div class="tile state-active"><b>%v</b><span>active</span></div>
  <div class="tile state-scheduled"><b>%v</b><span>scheduled</span></div>
  <div class="tile state-retryable"><b>%v</b><span>retryable</span></div>
  <div class="tile state-completed"><b>%v</b><span>completed (1 h)</span></div>
  <div class="tile state-discarded"><b>%v</b><span>dead letter</span></div>
  <div class="tile"><b>%v</b><span>processed / min</span></div>
  <div class="tile"><b>%v</b><span>failed / min</span></div>
</section>
`, s.Queues, s.Workers, s.Jobs.Available, s.Jobs.Active, s.Jobs.Scheduled, s.Jobs.Retryable, s.Jobs.Completed, s.Jobs.Discarded,
		s.Throughput.ProcessedPerMinute, s.Throughput.FailedPerMinute)
	b.f(`<section class="card">
  <h2>Throughput, last hour <span class="legend"><i class="s-enqueued"></i>enqueued <i class="s-processed"></i>completed <i class="s-failed"></i>failed attempts</span></h2>
  %s
  %s
</section>
`, d.Chart, when(d.History != nil && d.History.Truncated, `<p class="muted">More events than one read covers; later minutes are undercounted.</p>`))
	b.raw(`<section class="card">
  <h2>Queues</h2>
  <table class="queues">
    <thead><tr><th>queue</th><th>mode</th><th>status</th><th>available</th><th>active</th><th>scheduled</th><th>retryable</th><th>completed (1 h)</th><th>dead</th><th>cancelled (1 h)</th><th>/min</th><th></th></tr></thead>
    <tbody>
`)
	for _, q := range d.Queues {
		qe := url.QueryEscape(q.Name)
		state := "running"
		if q.Paused {
			state = "paused"
		}
		b.f(`      <tr data-queue="%s">
        <td><a href="/ojs/admin/jobs?queue=%s&amp;state=available">%s</a></td>
        <td>%s</td>
        <td><span class="pill state-%s">%s</span>%s</td>
`, q.Name, qe, q.Name, q.Mode, state, q.State, boundText(q))
		for _, c := range []struct {
			state string
			n     int
		}{{"available", q.Counts.Available}, {"active", q.Counts.Active}, {"scheduled", q.Counts.Scheduled}, {"retryable", q.Counts.Retryable}, {"completed", q.Counts.Completed}} {
			b.f("        <td><a href=\"/ojs/admin/jobs?queue=%s&amp;state=%s\">%v</a></td>\n", qe, c.state, c.n)
		}
		b.f("        <td><a href=\"/ojs/admin/dead-letter?queue=%s\">%v</a></td>\n        <td>%v</td>\n        <td>%v</td>\n",
			qe, q.Counts.Discarded, q.Counts.Cancelled, q.Throughput.ProcessedPerMinute)
		verb, label := "pause", "Pause"
		if q.Paused {
			verb, label = "resume", "Resume"
		}
		b.f("        <td><form method=\"post\" action=\"/ojs/admin/queues/%s/%s\"><button>%s</button></form></td>\n      </tr>\n", url.PathEscape(q.Name), verb, label)
	}
	b.none(len(d.Queues), "      ", 12, "No queues yet: push a job.")
	b.f(`    </tbody>
  </table>
  <p class="muted">Counts of waiting and dead jobs are exact (read from the indexes%s); completed and cancelled count the last hour. Computed %s.</p>
</section>
`, when(s.Capped, ", some capped"), s.ComputedAt)
}

func jobsView(b *Builder, p page) {
	b.raw("<h1>Jobs</h1>\n")
	d, _ := p.Data.(*jobsData)
	if d == nil {
		return
	}
	b.raw(`<form method="get" action="/ojs/admin/jobs" class="card search">
  <label>Queue <select name="queue"><option value="">all</option>`)
	for _, q := range d.Queues {
		b.f("<option %s>%s</option>", when(q == d.Query.Get("queue"), "selected"), q)
	}
	b.raw(`</select></label>
  <label>State <select name="state"><option value="">any (created in the window)</option>`)
	for _, s := range d.States {
		if s != job.Pending {
			b.f("<option %s>%s</option>", when(string(s) == d.Query.Get("state"), "selected"), s)
		}
	}
	b.f(`</select></label>
  <label>Type <input name="type" value="%s" placeholder="email.send or email.*"></label>
  <label>Since <input name="since" value="%s" placeholder="RFC 3339"></label>
  <label>Until <input name="until" value="%s" placeholder="RFC 3339"></label>
  <button>Search</button>
</form>
`, d.Query.Get("type"), d.Query.Get("since"), d.Query.Get("until"))
	if d.Page == nil {
		return
	}
	b.f("<p class=\"muted\">%s</p>\n", d.SearchNote)
	end := b.table("id", "type", "queue", "state", "attempt", "created", "finished")
	for _, it := range d.Page.Items {
		id := fmt.Sprint(it["id"])
		finished := ""
		for _, k := range []string{"completed_at", "discarded_at", "cancelled_at"} {
			if t, _ := it[k].(string); t != "" {
				finished += t
			}
		}
		b.f(`    <tr><td><a href="/ojs/admin/jobs/%s" class="mono">%s</a></td><td>%v</td><td>%v</td>
      <td><span class="pill state-%s">%v</span></td><td>%v</td><td>%v</td>
      <td>%s</td></tr>
`, id, shortID(id), it["type"], it["queue"], cls(fmt.Sprint(it["state"])), it["state"], it["attempt"], it["created_at"], finished)
	}
	end(len(d.Page.Items), "No jobs match.")
	b.next(d.NextURL)
}

func jobView(b *Builder, p page) {
	d, _ := p.Data.(*jobData)
	if d == nil {
		return
	}
	j := d.Job
	b.f(`<h1>Job <span class="mono">%s</span> <span class="pill state-%s">%s</span></h1>
<section class="card actions">
  <p><b>%s</b> on queue <a href="/ojs/admin/jobs?queue=%s&amp;state=available">%s</a>, attempt %v of %v, priority %v
`, j.ID, cls(string(j.State)), j.State, j.Type, url.QueryEscape(j.Queue), j.Queue, j.Attempt, j.Retry.MaxAttempts, j.Priority)
	if j.WorkflowID != "" {
		b.f(`   · step %s of workflow <a href="/ojs/admin/workflows/%s">%s</a>`, j.WorkflowNode, j.WorkflowID, shortID(j.WorkflowID))
	}
	if j.WorkerID != "" {
		b.f(` · worker <span class="mono">%s</span>`, j.WorkerID)
	}
	b.raw("</p>\n")
	if pr := j.ProgressShown(); pr != nil {
		b.raw("  <p>Progress ")
		if pr.Value != nil {
			b.f(`<progress value="%v" max="1"></progress> %v%% `, *pr.Value, int(*pr.Value*100))
		}
		b.f("%s <span class=\"muted\">reported %s</span></p>\n", pr.Message, pr.UpdatedAt)
	}
	if n, err := job.NeedsOf(j); err == nil && !n.IsZero() {
		b.f("  <p>Runs on a worker with %s <span class=\"muted\">(a FETCH that states capabilities)</span></p>\n", needsText(n))
	}
	if d.Key != nil {
		keyUse(b, d.Key)
	}
	if j.State == job.Discarded {
		b.f("  <form method=\"post\" action=\"/ojs/admin/jobs/%s/retry\"><button>Retry</button></form>\n", j.ID)
	}
	switch j.State {
	case job.Available, job.Scheduled, job.Retryable, job.Active, job.Pending:
		b.f("  <form method=\"post\" action=\"/ojs/admin/jobs/%s/cancel\"><button class=\"danger\">Cancel</button></form>\n", j.ID)
	}
	b.raw("</section>\n<section class=\"card\">\n  <h2>Attempts and errors</h2>\n")
	end := b.table("attempt", "type", "message", "at")
	for _, e := range d.Errors {
		b.f("    <tr><td>%v</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", e.Attempt, e.Type, e.Message, cmp.Or(e.OccurredAt, e.Timestamp))
	}
	end(len(d.Errors), "No failed attempts.")
	b.raw("</section>\n<section class=\"card\">\n  <h2>Events</h2>\n")
	end = b.table("time", "event", "data")
	for _, e := range d.Events {
		b.f("    <tr><td>%s</td><td><span class=\"mono\">%s</span></td><td><code>%s</code></td></tr>\n", e.Time, e.Type, jsonText(e.Data))
	}
	end(len(d.Events), "No events (they are kept for the event TTL and appear within a moment of each change).")
	b.f(`</section>
<section class="card">
  <h2>Envelope</h2>
  <pre class="json">%s</pre>
</section>
`, jsonText(d.Envelope))
}

func deadLetterView(b *Builder, p page) {
	b.raw("<h1>Dead letter</h1>\n")
	d, _ := p.Data.(*deadData)
	if d == nil {
		return
	}
	total := ""
	if t := d.List.Pagination.Total; t != nil && *t != 0 {
		total = fmt.Sprint(*t)
	}
	inQueue := ""
	if d.Queue != "" {
		inQueue = " in queue " + d.Queue
	}
	b.f("<p class=\"muted\">%s discarded jobs%s, newest first per queue.</p>\n", total, inQueue)
	end := b.table("id", "type", "queue", "attempts", "last error", "discarded", "")
	jobs := d.List.Jobs()
	for _, j := range jobs {
		lastErr, discarded := "", ""
		if j.Error != nil {
			lastErr = j.Error.Type + ": " + j.Error.Message
		}
		if j.DiscardedAt != nil {
			discarded = j.DiscardedAt.Format("2006-01-02 15:04:05")
		}
		b.f(`    <tr data-job-id="%s"><td><a class="mono" href="/ojs/admin/jobs/%s">%s</a></td><td>%s</td><td>%s</td><td>%v</td>
      <td>%s</td><td>%s</td>
      <td class="row-actions">
`, j.ID, j.ID, shortID(j.ID), j.Type, j.Queue, j.Attempt, lastErr, discarded)
		if j.WorkflowID == "" {
			b.f(`        <form method="post" action="/ojs/admin/dead-letter/%s/retry"><input type="hidden" name="back" value="/ojs/admin/dead-letter"><button>Retry</button></form>`+"\n", j.ID)
		}
		b.f(`        <form method="post" action="/ojs/admin/dead-letter/%s/delete"><button class="danger">Delete</button></form>
      </td></tr>
`, j.ID)
	}
	end(len(jobs), "The dead letter queue is empty.")
	b.next(d.NextURL)
}

func workersView(b *Builder, p page) {
	b.raw("<h1>Workers</h1>\n")
	l, _ := p.Data.(*admin.WorkerList)
	if l == nil {
		return
	}
	b.f("<p class=\"muted\">%v seen in the last day: %v running, %v quiet, %v stale.</p>\n", l.Summary.Total, l.Summary.Running, l.Summary.Quiet, l.Summary.Stale)
	end := b.table("id", "state", "host", "queues", "active jobs", "concurrency", "last heartbeat", "started", "")
	for _, w := range l.Items {
		told := ""
		if w.Directive != "" {
			told = " (told: " + w.Directive + ")"
		}
		queues := ""
		for _, q := range w.Queues {
			queues += q + " "
		}
		b.f(`    <tr data-worker-id="%s"><td class="mono">%s</td><td><span class="pill state-%s">%s</span>%s</td><td>%s</td>
      <td>%s</td><td>%v</td><td>%v</td><td>%s</td><td>%s</td>
      <td class="row-actions">
`, w.ID, w.ID, cls(w.State), w.State, told, w.Hostname, queues, w.ActiveJobs, w.Concurrency, w.LastHeartbeatAt, w.FirstSeenAt)
		if w.Stale {
			b.f(`        <form method="post" action="/ojs/admin/workers/%s/deregister"><button class="danger">Deregister</button></form>`+"\n", url.PathEscape(w.ID))
		} else {
			b.f(`        <form method="post" action="/ojs/admin/workers/%s/quiet"><button>Quiet</button></form>`+"\n", url.PathEscape(w.ID))
		}
		b.raw("      </td></tr>\n")
	}
	end(len(l.Items), "No worker has sent a heartbeat in the last day. (The push-mode worker function does not heartbeat.)")
}

func cronView(b *Builder, p page) {
	b.raw("<h1>Cron schedules</h1>\n")
	end := b.table("name", "expression", "time zone", "overlap", "enabled", "next run", "last run", "runs", "skips", "last job")
	vs, _ := p.Data.([]cron.View)
	for _, v := range vs {
		b.f(`    <tr><td>%s</td><td class="mono">%s</td><td>%s</td><td>%s</td><td>%v</td>
      <td>%s</td><td>%s</td><td>%v</td><td>%v</td>
      <td>`, v.Name, v.Expression, v.Timezone, v.OverlapPolicy, v.Enabled, deref(v.NextRunAt), deref(v.LastRunAt), v.RunCount, v.SkipCount)
		if id := deref(v.LastJobID); id != "" {
			b.f(`<a class="mono" href="/ojs/admin/jobs/%s">%s</a>`, id, shortID(id))
		}
		b.raw("</td></tr>\n")
	}
	end(len(vs), "No cron schedules (POST /ojs/v1/cron registers one).")
}

func webhooksView(b *Builder, p page) {
	d, _ := p.Data.(*webhooksData)
	if d == nil {
		d = &webhooksData{}
	}
	b.raw("<h1>Webhook subscriptions</h1>\n")
	end := b.table("id", "url", "events", "filter", "active", "timeout", "attempts", "updated")
	for _, s := range d.Subs {
		filter := "–"
		if f := s.Filter; f != nil {
			filter = strings.TrimSpace(cmp.Or(strings.Join(f.Queues, ", "), "any queue") + "; " + cmp.Or(strings.Join(f.JobTypes, ", "), "any type"))
		}
		b.f("    <tr><td class=\"mono\">%s</td><td class=\"mono\">%s</td><td>%s</td><td>%s</td><td>%v</td><td>%v ms</td><td>%v</td><td>%s</td></tr>\n",
			s.ID, s.URL, strings.Join(s.Events, ", "), filter, s.Active, s.TimeoutMS, s.MaxAttempts, s.UpdatedAt)
	}
	end(len(d.Subs), "No subscriptions (POST /ojs/v1/webhooks/subscriptions creates one).")
	b.f(`<p>Failed deliveries in the dead letter queue: <a href="/ojs/admin/dead-letter?queue=%s">%v</a> (redrive them there once the receiver answers).</p>
`, job.WebhookQueue, d.Dead)
}

func tenantsView(b *Builder, p page) {
	d, _ := p.Data.(*tenantsData)
	if d == nil {
		d = &tenantsData{}
	}
	b.raw(`<h1>Tenants</h1>
<p class="muted">Jobs enqueued with <span class="mono">X-OJS-Tenant</span> or <span class="mono">meta.tenant_id</span>: available now, and what happened to them in the last 24 hours.</p>
`)
	end := b.table("tenant", "queues", "available", "enqueued", "started", "completed", "failed", "discarded", "cancelled", "first seen")
	for _, st := range d.Stats {
		j := st.Jobs
		b.f("    <tr><td class=\"mono\">%s</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td></tr>\n",
			st.TenantID, strings.Join(st.Queues, ", "), j.Available, j.Enqueued, j.Started, j.Completed, j.Failed, j.Discarded, j.Cancelled, st.FirstSeenAt)
	}
	end(len(d.Stats), "No tenant has had a job.")
	if d.Total > len(d.Stats) {
		b.f("<p class=\"muted\">%d tenants; the first %d by id are shown (GET /ojs/v1/admin/tenants lists them all).</p>\n", d.Total, len(d.Stats))
	}
}

func rateLimitsView(b *Builder, p page) {
	d, _ := p.Data.(*rateLimitsData)
	var items []ratelimit.Info
	total := 0
	if d != nil && d.Page != nil {
		items, total = d.Page.Items, d.Page.Pagination.Total
	}
	b.raw(`<h1>Rate limits</h1>
<p class="muted">The rate limit keys jobs named (<span class="mono">options.rate_limit.key</span>) and tenants' concurrency keys. <b>Stop</b> overrides a key to concurrency 0 for an hour (PUT /ojs/v1/rate-limits/{key} sets any override).</p>
`)
	end := b.table("key", "concurrency (active / limit)", "rate (this window / limit)", "throttle", "override", "held by a handler until", "")
	for _, in := range items {
		conc, rate, thr, ov, hold := "–", "–", "–", "–", "–"
		if c := in.Concurrency; c != nil {
			conc = fmt.Sprintf("%d / %d", c.Active, c.Limit)
		}
		if r := in.Rate; r != nil {
			rate = fmt.Sprintf("%d / %d per %s", r.CurrentCount, r.Limit, r.Period)
		}
		if t := in.Throttle; t != nil {
			thr = fmt.Sprintf("%d per %s", t.Limit, t.Period)
		}
		if o := in.Override; o != nil {
			ov = "until " + cmp.Or(o.ExpiresAt, "removed")
		}
		if h := in.Dynamic; h != nil {
			hold = h.Until
		}
		b.f("    <tr><td class=\"mono\">%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class=\"actions\">\n", in.Key, conc, rate, thr, ov, hold)
		b.f(`        <form method="post" action="/ojs/admin/rate-limits/%s/stop"><button class="danger">Stop</button></form>`+"\n", url.PathEscape(in.Key))
		if in.Override != nil {
			b.f(`        <form method="post" action="/ojs/admin/rate-limits/%s/clear"><button>Remove override</button></form>`+"\n", url.PathEscape(in.Key))
		}
		b.raw("      </td></tr>\n")
	}
	end(len(items), "No job has named a rate limit key.")
	if total > len(items) {
		b.f("<p class=\"muted\">%d keys; the first %d are shown (GET /ojs/v1/rate-limits?page=2 lists more).</p>\n", total, len(items))
	}
}

func workflowsView(b *Builder, p page) {
	b.raw(`<h1>Workflows</h1>
<form method="get" action="/ojs/admin/workflows" class="card search">
  <label>Workflow id <input name="id" size="40" placeholder="0195…"></label><button>Open</button>
</form>
<h2>Created in the last day</h2>
`)
	end := b.table("id", "type", "name", "created")
	refs, _ := p.Data.([]admin.WorkflowRef)
	for _, w := range refs {
		b.f("  <tr><td><a class=\"mono\" href=\"/ojs/admin/workflows/%s\">%s</a></td><td>%s</td><td>%s</td><td>%s</td></tr>\n", w.ID, w.ID, w.Type, w.Name, w.CreatedAt)
	}
	end(len(refs), "None in the event log.")
}

func workflowView(b *Builder, p page) {
	d, _ := p.Data.(*workflowData)
	if d == nil || d.View == nil {
		return
	}
	b.f(`<div data-live="/ojs/admin/workflows/%s/graph" data-interval="%v" data-final="%v"></div>
<h1>Workflow <span class="mono">%s</span> <span class="pill state-%s" id="wf-state" data-state="%s">%s</span></h1>
<p class="muted">`, d.ID, p.Refresh, d.Final, d.ID, cls(d.State), d.State, d.State)
	if d.View.Type != "" {
		b.f("%v", d.View.Type)
	}
	if d.View.Name != "" {
		b.f(" · %v", d.View.Name)
	}
	m := d.View.Metadata
	b.f(" · %v of %v jobs completed, %v failed · created %v", m.CompletedCount, m.JobCount, m.FailedCount, m.CreatedAt)
	b.f(` · <progress value="%v" max="1" title="finished jobs and the progress running ones reported"></progress> %v%% done`, m.Progress, int(m.Progress*100))
	b.f(`%s</p>
<section class="card graph">
  %s
  <p class="legend states"><i class="state-waiting"></i>waiting <i class="state-pending"></i>pending <i class="state-active"></i>active <i class="state-running"></i>running <i class="state-completed"></i>completed <i class="state-failed"></i>failed <i class="state-cancelled"></i>cancelled</p>
</section>
<details class="card"><summary>JSON (GET /ojs/v1/workflows/%s)</summary><pre class="json">%s</pre></details>
`, when(!d.Final, " · updating live"), d.Graph, d.ID, jsonText(d.View))
}

func loginView(b *Builder, p page) {
	b.raw("<h1>Sign in</h1>\n")
	m, _ := p.Data.(map[string]any)
	if noToken, _ := m["NoToken"].(bool); noToken {
		b.raw("<p>This console needs no token (none is configured).</p>\n")
	}
	next, _ := m["Next"].(string)
	b.f(`<form method="post" action="/ojs/admin/login" class="card narrow">
  <input type="hidden" name="next" value="%s">
  <label>API token <input type="password" name="token" autocomplete="current-password" autofocus></label>
  <button>Sign in</button>
  <p class="muted">The same bearer token the OJS API asks for (OJS_AUTH_TOKEN). It is kept in a cookie for this console only.</p>
</form>
`, next)
}

func errorView(b *Builder, _ page) {
	b.raw(`<h1>Something went wrong</h1><p><a href="/ojs/admin/">Back to the dashboard</a></p>`)
}

// boundText shows a bounded queue's depth against its bound
// (backpressure), its pressure as a bar.
// needsText says what a job needs of a worker (docs/ml-resources.md).
func needsText(n job.Needs) string {
	var parts []string
	if n.Accelerator != "" {
		parts = append(parts, "accelerator "+n.Accelerator)
	}
	if n.GPUCount > 0 || n.GPUType != "" || n.GPUMemoryGB > 0 {
		parts = append(parts, fmt.Sprintf("%d × %s GPU, %v GB each", max(n.GPUCount, 1), cmp.Or(n.GPUType, "any"), n.GPUMemoryGB))
	}
	for _, a := range []struct {
		v    float64
		unit string
	}{{float64(n.CPUCores), "CPU cores"}, {n.MemoryGB, "GB memory"}, {n.StorageGB, "GB storage"}} {
		if a.v > 0 {
			parts = append(parts, fmt.Sprintf("%v %s", a.v, a.unit))
		}
	}
	for _, r := range n.Required {
		parts = append(parts, fmt.Sprintf("label %s %s %v", r.Key, r.Operator, r.Values))
	}
	for _, r := range n.Preferred {
		parts = append(parts, fmt.Sprintf("preferably label %s %s %v (weight %d)", r.Key, r.Operator, r.Values, r.Weight))
	}
	return strings.Join(parts, "; ")
}

func boundText(q admin.Queue) SafeHTML {
	if q.Bound == nil {
		return ""
	}
	depth := q.Counts.Available + q.Counts.Scheduled + q.Counts.Retryable
	return SafeHTML(fmt.Sprintf(` <span class="muted bound" title="backpressure: enqueues past the bound are refused (429)">%d / %d <progress value="%d" max="%d"></progress></span>`,
		depth, q.Bound.MaxDepth, min(depth, q.Bound.MaxDepth), q.Bound.MaxDepth)) // numbers only
}

// keyUse is a rate limit key's line on a keyed job's page: its limits and
// their use now.
func keyUse(b *Builder, in *ratelimit.Info) {
	b.f(`  <p>Rate limit key <span class="mono">%s</span>`, in.Key)
	if c := in.Concurrency; c != nil {
		b.f(` · concurrency %v / %v active <progress value="%v" max="%v"></progress>`, c.Active, c.Limit, c.Active, max(c.Limit, 1))
	}
	if r := in.Rate; r != nil {
		b.f(` · rate %v / %v per %s <span class="muted">(window resets %s)</span>`, r.CurrentCount, r.Limit, r.Period, r.WindowResetsAt)
	}
	if t := in.Throttle; t != nil {
		b.f(` · throttle %v per %s <span class="muted">(next start %s)</span>`, t.Limit, t.Period, t.NextAllowedAt)
	}
	b.raw("</p>\n")
}
