// Package httpapi serves the OJS HTTP binding (ojs-http-binding.md) under
// /ojs/v1 and /ojs/manifest as a plain net/http handler. The API function
// runs it behind API Gateway through pkg/edge/apigw; tests and the local
// runtime can serve it directly.
package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/ojs-aws/ojs-serverless/pkg/internal/jsoncase"
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
	// on every route; compared in constant time.
	AuthToken string
	// Version is sent in the OJS-Version header. Default "1.0".
	Version string
	// Logger receives one JSON line per request; no bodies, args, results
	// or tokens are logged. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Crons, when set, serves the cron routes under /ojs/v1/cron.
	Crons Crons
}

type route struct {
	method  string
	pattern []string
	name    string
	handle  func(w http.ResponseWriter, r *http.Request, p params) error
}

type params map[string]string

// Server is the OJS HTTP handler.
type Server struct {
	routes  []route
	cfg     Config
	started time.Time
}

func (s *Server) add(method, pattern string, h func(http.ResponseWriter, *http.Request, params) error) {
	s.routes = append(s.routes, route{method: method, pattern: strings.Split(strings.Trim(pattern, "/"), "/"), name: method + " " + pattern, handle: h})
}

func (r route) match(segs []string) (params, bool) {
	if len(segs) != len(r.pattern) {
		return nil, false
	}
	var p params
	for i, seg := range r.pattern {
		if strings.HasPrefix(seg, "{") {
			if segs[i] == "" {
				return nil, false
			}
			if p == nil {
				p = params{}
			}
			p[strings.Trim(seg, "{}")] = segs[i]
			continue
		}
		if seg != segs[i] {
			return nil, false
		}
	}
	return p, true
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
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ServeHTTP routes a request, with the OJS headers, request id, auth,
// content checks, size limit, panic recovery and an access log line.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	w := &statusWriter{ResponseWriter: rw}
	rid := r.Header.Get("X-Request-Id")
	if rid == "" || len(rid) > 128 {
		rid = "req_" + uuid.Must(uuid.NewV7()).String()
	}
	ctx := context.WithValue(r.Context(), ctxKey{}, rid)
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
		s.cfg.Logger.InfoContext(ctx, "http request", "request_id", rid, "method", r.Method, "route", routeName,
			"status", w.status, "duration_ms", s.cfg.Now().Sub(start).Milliseconds())
	}()
	if err := s.dispatch(w, r, &routeName); err != nil {
		s.writeError(w, r, err)
	}
}

func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, routeName *string) error {
	// Authentication comes first, as API Gateway's authorizer does on AWS:
	// without the token a caller learns nothing, not even which routes
	// and methods exist.
	if err := s.checkAuth(r); err != nil {
		return err
	}
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var allowed []string
	for _, rt := range s.routes {
		p, ok := rt.match(segs)
		if !ok {
			continue
		}
		if rt.method != r.Method {
			allowed = append(allowed, rt.method)
			continue
		}
		*routeName = rt.name
		if err := checkVersion(r); err != nil {
			return err
		}
		if r.Method == http.MethodPost || r.Method == http.MethodPatch {
			if err := checkContentType(r); err != nil {
				return err
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		return rt.handle(w, r, p)
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		return ojserr.Newf(ojserr.MethodNotAllowed, "Method %s is not allowed on %s; allowed: %s.", r.Method, r.URL.Path, strings.Join(allowed, ", "))
	}
	e := ojserr.Newf(ojserr.NotFound, "No OJS endpoint at %s %s.", r.Method, truncate(r.URL.Path, 200))
	e.Hint = "OJS endpoints live under /ojs/v1; see /ojs/manifest."
	return e
}

func (s *Server) checkAuth(r *http.Request) error {
	if s.cfg.AuthToken == "" {
		return nil
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	// Hashes of equal length, so the comparison does not reveal the
	// token's length either.
	sent, want := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.cfg.AuthToken))
	if !ok || subtle.ConstantTimeCompare(sent[:], want[:]) != 1 {
		return ojserr.New(ojserr.Unauthenticated, "Missing or invalid bearer token.")
	}
	return nil
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

// readBody reads a POST body, mapping an oversize body to 413.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, ojserr.Newf(ojserr.PayloadTooLarge, "The request body exceeds %d bytes.", MaxBodyBytes).With("max_bytes", MaxBodyBytes)
	}
	if err != nil {
		return nil, ojserr.Invalid("body", "Could not read the request body.")
	}
	return b, nil
}

// decodeObject decodes a JSON object body into v; an empty or malformed
// body is invalid_payload, wrong field types invalid_request.
func decodeObject(raw []byte, v any) error {
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
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return ojserr.Invalid(te.Field, "The '%s' field has the wrong type: expected %s.", te.Field, te.Type.String())
		}
		return ojserr.Invalid("body", "The request body does not match the expected shape.")
	}
	return nil
}
