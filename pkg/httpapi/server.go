// Package httpapi serves the OJS HTTP binding (ojs-http-binding.md) under
// /ojs/v1 and /ojs/manifest as a plain net/http handler. The API function
// runs it behind API Gateway through pkg/edge/apigw; tests and the local
// runtime can serve it directly.
package httpapi

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"path"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/internal/jsoncase"
	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/console"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// ContentType is the media type of every OJS response.
const ContentType = "application/openjobspec+json"

// Limits on request bodies, stated in the README and the manifest.
const (
	// MaxBodyBytes bounds any request body (a batch of jobs). A Lambda
	// synchronous invocation carries at most 6 MB.
	MaxBodyBytes = 4 << 20
)

// Config configures a Server. Zero values mean defaults.
type Config struct {
	// AuthToken, when set, is required as "Authorization: Bearer <token>"
	// on every route (or one of Tokens); compared in constant time. It
	// holds the admin level.
	AuthToken string
	// Tokens, when set, are bearer tokens that each hold one level
	// (ParseTokens, OJS_AUTH_TOKENS): a route answers 403
	// permission_denied to a token whose level does not allow it.
	Tokens map[string]Level
	// Version is sent in the OJS-Version header. Default "1.0".
	Version string
	// Logger receives one JSON line per request; no bodies, args, results
	// or tokens are logged. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Crons, when set, serves the cron routes under /ojs/v1/cron.
	Crons Crons
	// Schemas, when set, serves the schema registry under
	// /ojs/v1/admin/schemas.
	Schemas Schemas
	// Webhooks, when set, serves the webhook subscriptions under
	// /ojs/v1/webhooks/subscriptions.
	Webhooks Webhooks
	// Checkpoints, when set, serves the durable execution extension's
	// checkpoint routes under /ojs/v1/jobs/{id}/checkpoint (progress.go).
	Checkpoints Checkpoints
	// Tenants, when set, serves the tenant registry and stats under
	// /ojs/v1/admin/tenants and tenant-scoped queue reads (tenancy.go).
	Tenants Tenants
	// DeadLetter, when set, serves the dead letter routes under
	// /ojs/v1/dead-letter (ojs-dead-letter.md) and, with Admin, the Admin
	// API's dead letter routes that act on one job, bulk retries and stats.
	DeadLetter DeadLetter
	// Admin, when set, serves the Admin API under /ojs/v1/admin
	// (ojs-admin-api.md) and the table-derived gauges of /metrics.
	Admin *admin.Service
	// Console, when set, serves the web console under /ojs/admin/.
	Console *console.Console
	// FetchWait is how long a FETCH that names no wait_ms keeps looking
	// for jobs before it answers empty (lifecycle.FetchRequest.Wait). 0,
	// the default, answers at once.
	FetchWait time.Duration
	// Region is this deployment's federation region
	// (OJS_FEDERATION_REGION, docs/federation.md): the health answer names
	// it, and a request's jobs, workflows and cron templates geo-pinned to
	// another region are refused (job.CheckPin). "": none.
	Region string
	// Events is the event log GET /ojs/v1/events reads. Default: the log
	// in the backend's table, read with the backend's client
	// (events.NewStore(backend.DB(), backend.Table())), when the backend
	// names them as *store.Store does; otherwise none, and the route
	// answers a backend error.
	Events EventLog
}

// params reads a route's path values (http.Request.PathValue).
type params func(name string) string

// handlerFunc is a route's handler: it writes a successful answer itself and
// returns an error for Server to write in the OJS error shape.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p params) error

// Server is the OJS HTTP handler. Routes are net/http ServeMux patterns
// with a method ("POST /ojs/v1/jobs/{id}/activate"); Server answers
// unmatched paths and methods itself, in the OJS error shape.
type Server struct {
	mux *http.ServeMux
	// patterns holds every registered pattern with its level, so a
	// ServeMux answer that is not a route (a redirect to a cleaned path)
	// is recognised.
	patterns map[string]Level
	cfg      Config
	started  time.Time
	// metrics counts requests per route for GET /metrics.
	metrics *requestMetrics
}

// dispatchState carries a request's outcome from the route handler (run by
// the ServeMux) back to ServeHTTP.
type dispatchState struct {
	route string
	err   error
}

type stateKey struct{}

// add registers a route that needs level lv.
func (s *Server) add(lv Level, method, pattern string, h handlerFunc) {
	s.addRoute(lv, method, pattern, h, false)
}

// addRaw registers a route whose handler writes its own content type and
// reads its own body (the console and /metrics): no OJS content checks.
func (s *Server) addRaw(lv Level, method, pattern string, h handlerFunc) {
	s.addRoute(lv, method, pattern, h, true)
}

func (s *Server) addRoute(lv Level, method, pattern string, h handlerFunc, raw bool) {
	full := method + " " + pattern
	s.patterns[full] = lv
	s.mux.HandleFunc(full, func(w http.ResponseWriter, r *http.Request) {
		st, _ := r.Context().Value(stateKey{}).(*dispatchState)
		if st == nil {
			st = &dispatchState{}
		}
		st.route = full
		if !raw {
			if st.err = checkRequest(w, r); st.err != nil {
				return
			}
		}
		st.err = h(w, r, r.PathValue)
	})
}

// checkRequest applies the OJS checks to a request: its version, content
// type, body size and encoding.
func checkRequest(w http.ResponseWriter, r *http.Request) error {
	if err := checkVersion(r); err != nil {
		return err
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPatch || r.Method == http.MethodPut {
		if err := checkContentType(r); err != nil {
			return err
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	return decodeContentEncoding(w, r)
}

// Routes returns every registered route pattern ("POST /ojs/v1/jobs"),
// sorted: the route table, for tests that must cover each route.
func (s *Server) Routes() []string {
	return slices.Sorted(maps.Keys(s.patterns))
}

type ctxKey struct{}

// RequestID returns the request id of the request being served.
func RequestID(ctx context.Context) string {
	v, _ := ctx.Value(ctxKey{}).(string)
	return v
}

// statusWriter records the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = cmp.Or(w.status, code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.status = cmp.Or(w.status, http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// ServeHTTP routes a request, with the OJS headers, request id, auth,
// content checks, size limit, panic recovery and an access log line.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	w := &statusWriter{ResponseWriter: rw}
	rid := r.Header.Get("X-Request-Id")
	ctx := r.Context()
	// A client's id is kept in logs and job meta: printable ASCII only.
	if rid == "" || len(rid) > 128 || strings.ContainsFunc(rid, func(c rune) bool { return c < 0x20 || c > 0x7e }) {
		rid = "req_" + uuid.Must(uuid.NewV7()).String()
	} else {
		ctx = lifecycle.WithClientRequestID(ctx, rid) // into new jobs' meta
	}
	ctx = context.WithValue(ctx, ctxKey{}, rid)
	r = r.WithContext(ctx)
	h := w.Header()
	h.Set("OJS-Version", s.cfg.Version)
	h.Set("Content-Type", ContentType)
	h.Set("X-Request-Id", rid)
	routeName := "unmatched"
	defer func() {
		if rec := recover(); rec != nil {
			s.cfg.Logger.ErrorContext(ctx, "panic serving request", "request_id", rid, "panic", fmt.Sprint(rec), "stack", string(debug.Stack()))
			s.writeError(w, r, ojserr.Backend(fmt.Errorf("panic: %v", rec)))
		}
		d := s.cfg.Now().Sub(start)
		s.metrics.observe(routeName, w.status, d)
		// One line a request at DEBUG (API Gateway's access log has every
		// request); a server error's at WARN.
		level := slog.LevelDebug
		if w.status >= 500 {
			level = slog.LevelWarn
		}
		s.cfg.Logger.Log(ctx, level, "http request", "request_id", rid, "method", r.Method, "route", routeName,
			"status", w.status, "duration_ms", d.Milliseconds())
	}()
	if err := s.dispatch(w, r, &routeName); err != nil {
		s.writeError(w, r, err)
	}
}

// routeMethods are the methods probed to build a 405's Allow header.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// match returns the registered pattern ServeMux picks for r ("" when none).
// A GET pattern also matches HEAD in ServeMux; here it does not (as
// before the move to ServeMux, HEAD is answered 405).
func (s *Server) match(r *http.Request) string {
	_, pattern := s.mux.Handler(r)
	if s.patterns[pattern] == "" {
		return ""
	}
	if m, _, _ := strings.Cut(pattern, " "); m != r.Method {
		return ""
	}
	return pattern
}

func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, routeName *string) error {
	// Authentication comes first, as API Gateway's authorizer does on AWS:
	// without the token a caller learns nothing, not even which routes
	// and methods exist. The console handles its own (a login page, a
	// cookie holding AuthToken, the admin's).
	console := isConsolePath(r.URL.Path)
	lv := LevelAdmin
	if !console || s.cfg.AuthToken == "" {
		var err error
		if lv, err = s.checkAuth(r); err != nil {
			return err
		}
	}
	// ServeMux would redirect an unclean path ("//ojs//v1"); the API
	// answers 404 as for any path that is not a route.
	if clean := cleanPath(r.URL.Path); clean == r.URL.Path || console {
		if pattern := s.match(r); pattern != "" {
			if err := authorize(lv, s.patterns[pattern]); err != nil {
				*routeName = pattern
				return err
			}
			t, err := requestTenant(r, pattern, s.patterns[pattern])
			if err != nil {
				*routeName = pattern
				return err
			}
			if t != "" {
				// The request is scoped to the tenant (tenancy.go).
				r = r.WithContext(job.WithTenant(r.Context(), t))
			}
			st := &dispatchState{}
			r = r.WithContext(context.WithValue(job.WithRegion(r.Context(), s.cfg.Region), stateKey{}, st))
			s.mux.ServeHTTP(w, r)
			*routeName = st.route
			return st.err
		}
		var allowed []string
		for _, m := range routeMethods {
			probe := r.Clone(r.Context())
			probe.Method = m
			if s.match(probe) != "" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			return ojserr.Newf(ojserr.MethodNotAllowed, "Method %s is not allowed on %s; allowed: %s.", r.Method, truncate(r.URL.Path, 200), strings.Join(allowed, ", "))
		}
	}
	e := ojserr.Newf(ojserr.NotFound, "No OJS endpoint at %s %s.", r.Method, truncate(r.URL.Path, 200))
	e.Hint = "OJS endpoints live under /ojs/v1; see /ojs/manifest."
	return e
}

// cleanPath is path.Clean keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

func checkVersion(r *http.Request) error {
	v := r.Header.Get("OJS-Version")
	if v == "" || v == "1" || strings.HasPrefix(v, "1.") {
		return nil
	}
	return ojserr.Newf(ojserr.Unsupported, "OJS version %q is not supported; this server speaks 1.0.", truncate(v, 32)).With("supported", []string{"1.0"})
}

func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == ContentType || mt == "application/json") {
		return nil
	}
	return ojserr.Invalid("Content-Type", "Unsupported content type %q; send application/openjobspec+json or application/json.", truncate(ct, 100))
}

// SupportedEncodings are the request Content-Encodings the API undoes
// (ojs-payload-limits.md 6.1; zstd is not in Go's standard library).
var SupportedEncodings = []string{"gzip"}

// decodeContentEncoding undoes a request body's Content-Encoding: gzip or
// none. MaxBodyBytes applies to the bytes sent and again to what they
// expand to (ojs-payload-limits.md 6.2: limits apply to the decompressed
// payload), so a small body cannot expand without bound. Another
// encoding is a 415; a body that is not gzip, a 400.
func decodeContentEncoding(w http.ResponseWriter, r *http.Request) error {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return nil
	case "gzip", "x-gzip":
	default:
		return ojserr.Newf(ojserr.UnsupportedMediaType, "Content-Encoding %q is not supported; send the body gzip-compressed or not compressed.", truncate(enc, 40)).
			With("supported_encodings", SupportedEncodings)
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		return ojserr.New(ojserr.InvalidPayload, "The request body is not gzip data, as its Content-Encoding says.").With("field", "body")
	}
	r.Body = http.MaxBytesReader(w, gzipBody{zr, r.Body}, MaxBodyBytes)
	r.Header.Del("Content-Encoding")
	return nil
}

// gzipBody reads a request body through its gzip reader.
type gzipBody struct {
	*gzip.Reader
	raw io.Closer
}

func (b gzipBody) Close() error { return b.raw.Close() }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// errorBody is the OJS error envelope.
type errorBody struct {
	Error struct {
		Code      ojserr.Code    `json:"code"`
		Type      string         `json:"type,omitempty"`
		Message   string         `json:"message"`
		Retryable bool           `json:"retryable"`
		Details   map[string]any `json:"details,omitempty"`
		Hint      string         `json:"hint,omitempty"`
		DocsURL   string         `json:"docs_url,omitempty"`
		RequestID string         `json:"request_id"`
	} `json:"error"`
}

// DocsBase is where error codes are documented.
const DocsBase = "https://github.com/ojs-aws/ojs-serverless/blob/main/docs/errors.md#"

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := ojserr.As(err)
	status := e.Status()
	if status >= 500 {
		s.cfg.Logger.ErrorContext(r.Context(), "request failed", "request_id", RequestID(r.Context()), "code", string(e.Code), "error", err.Error())
	}
	var b errorBody
	code, typ := e.Wire()
	b.Error.Code, b.Error.Type, b.Error.Message, b.Error.Retryable = code, typ, e.Message, e.Retryable
	b.Error.Details, b.Error.Hint, b.Error.RequestID = e.Details, e.Hint, RequestID(r.Context())
	b.Error.DocsURL = DocsBase + string(e.Code) // the specific kind's entry
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ojs"`)
	}
	for k, v := range e.Headers {
		w.Header().Set(k, v)
	}
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"backend_error","message":"Failed to encode the response.","retryable":true}}`)
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// reply writes body with status 200 (an answer's own status and
// Location), unless err is set: then it returns err for the server to
// answer.
func reply(w http.ResponseWriter, body any, err error) error {
	if err != nil {
		return err
	}
	status := http.StatusOK
	if a, ok := body.(answer); ok {
		if a.location != "" {
			w.Header().Set("Location", a.location)
		}
		status, body = a.status, a.body
	}
	writeJSON(w, status, body)
	return nil
}

// answer is a route's answer with a status other than 200, and the
// Location of what it created ("": none).
type answer struct {
	status   int
	location string
	body     any
}

// created is body answered 201 with location when isNew, else 200.
func created(isNew bool, location string, body any) any {
	if !isNew {
		return body
	}
	return answer{http.StatusCreated, location, body}
}

// answerFunc computes a route's 200 answer.
type answerFunc func(r *http.Request, p params) (any, error)

// ok serves a route whose answer is fn's, with status 200.
func ok(fn answerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p params) error {
		v, err := fn(r, p)
		return reply(w, v, err)
	}
}

// under is ok with fn's answer under key.
func under(key string, fn answerFunc) handlerFunc {
	return ok(func(r *http.Request, p params) (any, error) {
		v, err := fn(r, p)
		return map[string]any{key: v}, err
	})
}

// byPath serves op's result for the path value name, under key ("": as it is).
func byPath[T any](key, name string, op func(context.Context, string) (T, error)) handlerFunc {
	return ok(func(r *http.Request, p params) (any, error) {
		v, err := op(r.Context(), p(name))
		if key == "" {
			return v, err
		}
		return map[string]any{key: v}, err
	})
}

// withBody is ok for a route that reads its body (readBody) first.
func withBody(fn func(r *http.Request, p params, raw []byte) (any, error)) handlerFunc {
	return ok(func(r *http.Request, p params) (any, error) {
		raw, err := readBody(r)
		if err != nil {
			return nil, err
		}
		return fn(r, p, raw)
	})
}

// readBody reads a POST body, mapping an oversize body to 413.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, ojserr.Newf(ojserr.PayloadTooLarge, "The request body exceeds %d bytes.", MaxBodyBytes).With("max_bytes", MaxBodyBytes)
	}
	if err != nil {
		return nil, ojserr.Invalid("body", "Could not read the request body.")
	}
	return b, nil
}

// readObject reads a JSON object body (readBody) into v; an empty or
// malformed body is invalid_payload, wrong field types invalid_request.
func readObject(r *http.Request, v any) error {
	raw, err := readBody(r)
	if err != nil {
		return err
	}
	t := strings.TrimSpace(string(raw))
	if t == "" {
		return ojserr.New(ojserr.InvalidPayload, "The request body is empty; send a JSON object.").With("field", "body")
	}
	if !json.Valid(raw) {
		return ojserr.New(ojserr.InvalidPayload, "The request body is not valid JSON.").With("field", "body")
	}
	if !strings.HasPrefix(t, "{") {
		return ojserr.Invalid("body", "The request body must be a JSON object.")
	}
	if err := jsoncase.Unmarshal(raw, v); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return ojserr.Invalid(te.Field, "The '%s' field has the wrong type: expected %s.", te.Field, te.Type.String())
		}
		return ojserr.Invalid("body", "The request body does not match the expected shape.")
	}
	return nil
}

// isConsolePath reports whether p is under the web console's prefix.
func isConsolePath(p string) bool {
	return p == ConsolePrefix[:len(ConsolePrefix)-1] || strings.HasPrefix(p, ConsolePrefix)
}

// ConsolePrefix is where the web console is served.
const ConsolePrefix = console.Prefix

// addConsole registers the console's routes. They write their own
// content type and answer HTML, so they skip the OJS JSON checks; the
// console authenticates with the same token (header or its cookie).
func (s *Server) addConsole(c *console.Console) {
	for _, rt := range c.Routes() {
		h := rt.Handler
		s.addRaw(LevelAdmin, rt.Method, rt.Pattern, func(w http.ResponseWriter, r *http.Request, _ params) error {
			w.Header().Del("Content-Type")
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			h(w, r)
			return nil
		})
	}
}
