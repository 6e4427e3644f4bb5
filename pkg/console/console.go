// Package console is the operator's web console, served by the API
// function under /ojs/admin/. Pages are rendered on the server (views.go,
// SVG for charts and graphs) from the services the Admin API uses, with
// embedded assets; static/console.js refreshes marked parts in place. The
// auth token is kept in an HttpOnly, SameSite=Strict cookie.
package console

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
	"github.com/ojs-aws/ojs-serverless/pkg/wfview"
)

// Prefix is where the console is served.
const Prefix = "/ojs/admin/"

//go:embed static/*
var assets embed.FS

// Workflows reads workflows (implemented by *workflow.Engine).
type Workflows interface {
	Get(ctx context.Context, id string) (*wfview.View, error)
}

// Crons lists cron schedules (implemented by *cron.Service).
type Crons interface {
	List(ctx context.Context, enabled *bool) ([]cron.View, error)
}

// Webhooks lists webhook subscriptions (implemented by *webhook.Store).
type Webhooks interface {
	List(ctx context.Context) ([]webhook.Subscription, error)
}

// RateLimits reads and overrides rate limit keys (implemented by
// *queue.Service).
type RateLimits interface {
	KeyInfo(ctx context.Context, key string) (*ratelimit.Info, error)
	ListKeys(ctx context.Context, page, perPage int) (*queue.KeyPage, error)
	OverrideKey(ctx context.Context, key string, body []byte) (*ratelimit.Info, error)
}

// Config configures the console. Admin is required.
type Config struct {
	Admin *admin.Service
	// Workflows, when set, serves the workflow pages.
	Workflows Workflows
	// Crons, when set, serves the cron page.
	Crons Crons
	// Webhooks, when set, serves the webhooks page.
	Webhooks Webhooks
	// RateLimits, when set, serves the rate limits page and shows a
	// keyed job's rate limit key's use on its page.
	RateLimits RateLimits
	// Tenants, when set, serves the tenants page, with each tenant's
	// counts read from TenantEvents too.
	Tenants      *tenant.Registry
	TenantEvents tenant.EventLog
	// AuthToken, when set, is required (bearer header or the console's
	// cookie) on every console page.
	AuthToken string
	// IsPush tells push-mode queues (may be nil).
	IsPush func(string) bool
	// Logger receives errors. Default slog.Default().
	Logger *slog.Logger
	// Refresh is how often live parts refresh. Default 1 s for workflow
	// graphs, 5 s for the dashboard.
	Refresh time.Duration
}

// Console serves the web console.
type Console struct {
	cfg Config
}

// Route is one console route: a ServeMux pattern with its method.
type Route struct {
	Method, Pattern string
	Handler         http.HandlerFunc
}

// New returns a console.
func New(cfg Config) (*Console, error) {
	if cfg.Admin == nil {
		return nil, errors.New("console: Admin is required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Second
	}
	return &Console{cfg: cfg}, nil
}

// Routes lists the console's routes.
func (c *Console) Routes() []Route {
	g, p := http.MethodGet, http.MethodPost
	return []Route{
		{g, "/ojs/admin", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, Prefix, http.StatusMovedPermanently) }},
		{g, Prefix + "{$}", c.auth(c.dashboard)},
		{g, Prefix + "fragments/dashboard", c.auth(fragment(c.dashboard))},
		{p, Prefix + "queues/{name}/pause", c.auth(c.pause(true))},
		{p, Prefix + "queues/{name}/resume", c.auth(c.pause(false))},
		{g, Prefix + "jobs", c.auth(c.jobs)},
		{g, Prefix + "jobs/{id}", c.auth(c.job)},
		{p, Prefix + "jobs/{id}/retry", c.auth(c.retryJob)},
		{p, Prefix + "jobs/{id}/cancel", c.auth(c.cancelJob)},
		{g, Prefix + "dead-letter", c.auth(c.deadLetter)},
		{p, Prefix + "dead-letter/{id}/retry", c.auth(c.retryJob)},
		{p, Prefix + "dead-letter/{id}/delete", c.auth(c.deleteDead)},
		{g, Prefix + "workers", c.auth(c.workers)},
		{p, Prefix + "workers/{id}/quiet", c.auth(c.quietWorker)},
		{p, Prefix + "workers/{id}/deregister", c.auth(c.deregister)},
		{g, Prefix + "cron", c.auth(c.crons)},
		{g, Prefix + "webhooks", c.auth(c.webhooks)},
		{g, Prefix + "tenants", c.auth(c.tenants)},
		{g, Prefix + "rate-limits", c.auth(c.rateLimits)},
		{p, Prefix + "rate-limits/{key}/stop", c.auth(c.overrideKey(stopKey))},
		{p, Prefix + "rate-limits/{key}/clear", c.auth(c.overrideKey(nil))},
		{g, Prefix + "workflows", c.auth(c.workflows)},
		{g, Prefix + "workflows/{id}", c.auth(c.workflow)},
		{g, Prefix + "workflows/{id}/graph", c.auth(fragment(c.workflow))},
		{g, Prefix + "static/{file}", c.static},
		{g, Prefix + "login", c.loginPage},
		{p, Prefix + "login", c.login},
		{p, Prefix + "logout", c.logout},
	}
}

const cookieName = "ojs_console"

// tokenOK compares tok with the token (constant time, on hashes of equal
// length).
func (c *Console) tokenOK(tok string) bool {
	got, want := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(c.cfg.AuthToken))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// authorized checks the bearer header or the console cookie against the
// token.
func (c *Console) authorized(r *http.Request) bool {
	if c.cfg.AuthToken == "" {
		return true
	}
	if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && c.tokenOK(got) {
		return true
	}
	ck, err := r.Cookie(cookieName)
	return err == nil && c.tokenOK(ck.Value)
}

// plain answers status with a line of text.
func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}

// sameOrigin refuses a cross-site form post (the cookie is SameSite=Strict
// already; this also covers browsers that ignore it).
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}

func (c *Console) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.authorized(r) {
			if r.Method == http.MethodGet && r.Header.Get("X-Console-Fragment") == "" {
				http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			plain(w, http.StatusUnauthorized, "Missing or invalid token.")
			return
		}
		if r.Method == http.MethodPost && !sameOrigin(r) {
			plain(w, http.StatusForbidden, "Cross-site request refused.")
			return
		}
		h(w, r)
	}
}

// page is what every template receives.
type page struct {
	Title   string
	Nav     string
	Auth    bool
	Flash   string
	Error   string
	Refresh int64
	Data    any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, status int, p page) {
	view, ok := views[name]
	if !ok {
		c.cfg.Logger.ErrorContext(r.Context(), "console render failed", "page", name, "error", "no such view")
		plain(w, http.StatusInternalServerError, "The page could not be rendered.")
		return
	}
	p.Auth = c.cfg.AuthToken != ""
	p.Flash = cmp.Or(p.Flash, r.URL.Query().Get("flash"))
	p.Refresh = c.cfg.Refresh.Milliseconds()
	var b Builder
	if r.Header.Get("X-Console-Fragment") != "" {
		view(&b, p)
	} else {
		pageLayout(&b, p, view)
	}
	setHTMLHeaders(w)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

func setHTMLHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
}

// fail renders an error page with the OJS error's status and message
// (never a backend's internals).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := ojserr.As(err)
	msg := e.Message
	if e.Status() >= 500 {
		c.cfg.Logger.ErrorContext(r.Context(), "console request failed", "path", r.URL.Path, "error", err.Error())
		msg = "The backend failed; try again."
	}
	c.render(w, r, "error", e.Status(), page{Title: "Error", Error: msg})
}

// done ends a form post: back to to with flash, or the error page when
// its change failed.
func (c *Console) done(w http.ResponseWriter, r *http.Request, err error, to, flash string) {
	if err != nil {
		c.fail(w, r, err)
		return
	}
	back(w, r, to, flash)
}

// show renders view with status 200, or the error page when reading its
// content failed.
func (c *Console) show(w http.ResponseWriter, r *http.Request, err error, view string, p page) {
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, view, http.StatusOK, p)
}

// back redirects a form post to where it came from (a console page named
// by the form's "back" field, else to), with a message.
func back(w http.ResponseWriter, r *http.Request, to, flash string) {
	if f := r.FormValue("back"); strings.HasPrefix(f, Prefix) && !strings.HasPrefix(f, "//") {
		to = f
	}
	u, err := url.Parse(to)
	if err != nil {
		u = &url.URL{Path: Prefix}
	}
	q := u.Query()
	q.Set("flash", flash)
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

func (c *Console) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := assets.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	ct := "text/plain; charset=utf-8"
	switch {
	case strings.HasSuffix(name, ".css"):
		ct = "text/css; charset=utf-8"
	case strings.HasSuffix(name, ".js"):
		ct = "text/javascript; charset=utf-8"
	case strings.HasSuffix(name, ".svg"):
		ct = "image/svg+xml"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	next := r.URL.Query().Get("next")
	c.render(w, r, "login", http.StatusOK, page{Title: "Sign in", Data: map[string]any{"Next": next, "NoToken": c.cfg.AuthToken == ""}})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	tok := r.FormValue("token")
	next := r.FormValue("next")
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") {
		next = Prefix
	}
	if c.cfg.AuthToken != "" {
		if !c.tokenOK(tok) {
			c.render(w, r, "login", http.StatusUnauthorized, page{Title: "Sign in", Error: "That token is not valid.", Data: map[string]any{"Next": next}})
			return
		}
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https", MaxAge: 12 * 3600})
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// dashboardData is the dashboard's content.
type dashboardData struct {
	Stats   *admin.Stats
	Queues  []admin.Queue
	History *admin.History
	Chart   SafeHTML
}

func (c *Console) dashboardData(ctx context.Context) (*dashboardData, error) {
	st, err := c.cfg.Admin.Stats(ctx)
	if err != nil {
		return nil, err
	}
	ql, err := c.cfg.Admin.Queues(ctx, 1, admin.MaxPerPage, c.cfg.IsPush)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	h, err := c.cfg.Admin.History(ctx, admin.HistoryQuery{Period: time.Minute, PeriodName: "1m", Since: now.Add(-time.Hour), Until: now})
	if err != nil {
		return nil, err
	}
	return &dashboardData{Stats: st, Queues: ql.Items, History: h, Chart: Chart(h)}, nil
}

func (c *Console) dashboard(w http.ResponseWriter, r *http.Request) {
	d, err := c.dashboardData(r.Context())
	c.show(w, r, err, "dashboard", page{Title: "Dashboard", Nav: "dashboard", Data: d})
}

// fragment serves h's page without the layout around it (a live part's
// refresh).
func fragment(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Console-Fragment", "1")
		h(w, r)
	}
}

func (c *Console) pause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		_, err := c.cfg.Admin.SetPaused(r.Context(), name, paused)
		verb := "resumed"
		if paused {
			verb = "paused"
		}
		c.done(w, r, err, Prefix, fmt.Sprintf("Queue %s %s.", name, verb))
	}
}

// jobsData is the job search page's content.
type jobsData struct {
	Query      url.Values
	States     []job.State
	Queues     []string
	Page       *admin.JobPage
	NextURL    string
	SearchNote string
}

func (c *Console) jobs(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	maps.DeleteFunc(v, func(k string, vals []string) bool { return k == "flash" || len(vals) == 0 || vals[0] == "" })
	d := &jobsData{Query: v, States: job.States}
	if qs, err := c.cfg.Admin.Queues(r.Context(), 1, admin.MaxPerPage, nil); err == nil {
		for _, q := range qs.Items {
			d.Queues = append(d.Queues, q.Name)
		}
	}
	q, err := admin.ParseJobQuery(v)
	if err == nil {
		d.Page, err = c.cfg.Admin.SearchJobs(r.Context(), q)
	}
	if err != nil {
		e := ojserr.As(err)
		if e.Status() >= 500 {
			c.fail(w, r, err)
			return
		}
		c.render(w, r, "jobs", http.StatusBadRequest, page{Title: "Jobs", Nav: "jobs", Error: e.Message, Data: d})
		return
	}
	if d.Page.Pagination.NextCursor != "" {
		n := maps.Clone(v)
		n.Set("cursor", d.Page.Pagination.NextCursor)
		d.NextURL = Prefix + "jobs?" + n.Encode()
	}
	if d.Page.Window != nil {
		d.SearchNote = fmt.Sprintf("Read from the event log between %s and %s.", d.Page.Window.Since, d.Page.Window.Until)
	} else {
		d.SearchNote = "Read from the queue indexes (every job in that state)."
	}
	c.render(w, r, "jobs", http.StatusOK, page{Title: "Jobs", Nav: "jobs", Data: d})
}

// jobData is the job page's content.
type jobData struct {
	Job      *job.Job
	Envelope map[string]any
	Events   []events.Event
	Errors   []job.ErrorInfo
	// Key is the job's rate limit key's use (nil: none, or not read).
	Key *ratelimit.Info
}

func (c *Console) job(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	env, j, err := c.cfg.Admin.JobDetail(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	evs, err := c.cfg.Admin.JobEvents(r.Context(), id, 200)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	errs := append([]job.ErrorInfo(nil), j.Errors...)
	sort.SliceStable(errs, func(a, b int) bool { return errs[a].Attempt > errs[b].Attempt })
	d := &jobData{Job: j, Envelope: env, Events: evs, Errors: errs}
	if j.KeyLimit != nil && c.cfg.RateLimits != nil {
		if d.Key, err = c.cfg.RateLimits.KeyInfo(r.Context(), j.KeyLimit.Key); err != nil {
			c.cfg.Logger.WarnContext(r.Context(), "console: rate limit key not read", "key", j.KeyLimit.Key, "error", err.Error())
		}
	}
	c.render(w, r, "job", http.StatusOK, page{Title: "Job " + id, Nav: "jobs", Data: d})
}

func (c *Console) retryJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	_, err := c.cfg.Admin.RetryJob(r.Context(), id)
	c.done(w, r, err, Prefix+"jobs/"+url.PathEscape(id), "Job retried: it is available again with its attempts reset.")
}

func (c *Console) cancelJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	_, _, err := c.cfg.Admin.CancelJob(r.Context(), id)
	c.done(w, r, err, Prefix+"jobs/"+url.PathEscape(id), "Job cancelled.")
}

func (c *Console) deleteDead(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := c.cfg.Admin.DeleteDead(r.Context(), id)
	c.done(w, r, err, Prefix+"dead-letter", "Job "+id+" deleted.")
}

// deadData is the dead letter page's content.
type deadData struct {
	List    *admin.DeadList
	Queue   string
	NextURL string
}

func (c *Console) deadLetter(w http.ResponseWriter, r *http.Request) {
	v := url.Values{}
	for _, k := range []string{"queue", "cursor", "type"} {
		if x := r.URL.Query().Get(k); x != "" {
			v.Set(k, x)
		}
	}
	q, err := admin.ParseJobQuery(v)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	l, err := c.cfg.Admin.DeadLetter(r.Context(), q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := &deadData{List: l, Queue: v.Get("queue")}
	if l.Pagination.NextCursor != "" {
		v.Set("cursor", l.Pagination.NextCursor)
		d.NextURL = Prefix + "dead-letter?" + v.Encode()
	}
	c.render(w, r, "deadletter", http.StatusOK, page{Title: "Dead letter", Nav: "dead-letter", Data: d})
}

func (c *Console) workers(w http.ResponseWriter, r *http.Request) {
	l, err := c.cfg.Admin.Workers(r.Context(), 1, admin.MaxWorkers)
	c.show(w, r, err, "workers", page{Title: "Workers", Nav: "workers", Data: l})
}

func (c *Console) quietWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	_, err := c.cfg.Admin.QuietWorker(r.Context(), id)
	c.done(w, r, err, Prefix+"workers", "Worker "+id+" will be told to go quiet on its next heartbeat.")
}

func (c *Console) deregister(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := c.cfg.Admin.Deregister(r.Context(), id)
	c.done(w, r, err, Prefix+"workers", "Worker "+id+" deregistered.")
}

func (c *Console) crons(w http.ResponseWriter, r *http.Request) {
	var vs []cron.View
	var err error
	if c.cfg.Crons != nil {
		vs, err = c.cfg.Crons.List(r.Context(), nil)
	}
	c.show(w, r, err, "cron", page{Title: "Cron", Nav: "cron", Data: vs})
}

// webhooksData is the webhooks page: the subscriptions and how many
// deliveries wait in the dead letter queue (the page links to them there,
// where each is redriven).
type webhooksData struct {
	Subs []webhook.Subscription
	Dead int
}

func (c *Console) webhooks(w http.ResponseWriter, r *http.Request) {
	d := &webhooksData{}
	var err error
	if c.cfg.Webhooks != nil {
		d.Subs, err = c.cfg.Webhooks.List(r.Context())
	}
	if err == nil {
		var l *admin.DeadList
		if l, err = c.cfg.Admin.DeadLetter(r.Context(), admin.JobQuery{Queue: job.WebhookQueue, PerPage: 1}); err == nil && l.Pagination.Total != nil {
			d.Dead = *l.Pagination.Total
		}
	}
	c.show(w, r, err, "webhooks", page{Title: "Webhooks", Nav: "webhooks", Data: d})
}

// maxTenantRows bounds the tenants the tenants page counts (each costs
// reads of its queues' tenant index and of its events of the day).
const maxTenantRows = 50

// tenantsData is the tenants page: each tenant's counts (the first
// maxTenantRows by id), and how many there are.
type tenantsData struct {
	Stats []*tenant.Stats
	Total int
}

func (c *Console) tenants(w http.ResponseWriter, r *http.Request) {
	d := &tenantsData{}
	var err error
	if c.cfg.Tenants != nil {
		var list []tenant.Info
		if list, err = c.cfg.Tenants.List(r.Context()); err == nil {
			d.Total = len(list)
			for _, in := range list[:min(len(list), maxTenantRows)] {
				st, serr := c.cfg.Tenants.Stats(r.Context(), c.cfg.TenantEvents, in.ID, time.Now())
				if serr != nil {
					err = serr
					break
				}
				d.Stats = append(d.Stats, st)
			}
		}
	}
	c.show(w, r, err, "tenants", page{Title: "Tenants", Nav: "tenants", Data: d})
}

// rateLimitsData is the rate limits page: the first page of keys.
type rateLimitsData struct {
	Page *queue.KeyPage
}

func (c *Console) rateLimits(w http.ResponseWriter, r *http.Request) {
	d := &rateLimitsData{}
	var err error
	if c.cfg.RateLimits != nil {
		d.Page, err = c.cfg.RateLimits.ListKeys(r.Context(), 1, queue.MaxKeysPage)
	}
	c.show(w, r, err, "ratelimits", page{Title: "Rate limits", Nav: "rate-limits", Data: d})
}

// stopKey is the console's override that stops a key's starts for an
// hour (incident response: the API behind the key is down).
var stopKey = []byte(`{"concurrency": 0, "expires_at": "+PT1H"}`)

// overrideKey sets the override body on a key (nil: removes its override).
func (c *Console) overrideKey(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		var err error = ojserr.NotFoundf("rate limit key", key) // no keys served
		if c.cfg.RateLimits != nil {
			_, err = c.cfg.RateLimits.OverrideKey(r.Context(), key, body)
		}
		msg := fmt.Sprintf("Rate limit key %s stopped for an hour.", key)
		if body == nil {
			msg = fmt.Sprintf("Rate limit key %s follows its jobs' limits again.", key)
		}
		c.done(w, r, err, Prefix+"rate-limits", msg)
	}
}

func (c *Console) workflows(w http.ResponseWriter, r *http.Request) {
	if id := strings.TrimSpace(r.URL.Query().Get("id")); id != "" {
		http.Redirect(w, r, Prefix+"workflows/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	refs, err := c.cfg.Admin.RecentWorkflows(r.Context())
	c.show(w, r, err, "workflows", page{Title: "Workflows", Nav: "workflows", Data: refs})
}

// workflowData is the workflow page's content.
type workflowData struct {
	ID string
	// View is the workflow as GET /ojs/v1/workflows/{id} answers it.
	View  *wfview.View
	Graph SafeHTML
	State string
	Final bool
}

func (c *Console) workflowData(ctx context.Context, id string) (*workflowData, error) {
	if c.cfg.Workflows == nil {
		return nil, ojserr.NotFoundf("workflow", id)
	}
	v, err := c.cfg.Workflows.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	g := Layout(v)
	return &workflowData{ID: id, View: v, Graph: g.SVG(func(jid string) string { return Prefix + "jobs/" + url.PathEscape(jid) }),
		State: v.State, Final: v.State == "completed" || v.State == "failed" || v.State == "cancelled"}, nil
}

func (c *Console) workflow(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	d, err := c.workflowData(r.Context(), id)
	c.show(w, r, err, "workflow", page{Title: "Workflow " + id, Nav: "workflows", Data: d})
}
