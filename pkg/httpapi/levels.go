package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/checkpoint"
	"github.com/ojs-aws/ojs-serverless/pkg/console"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/schema"
	"github.com/ojs-aws/ojs-serverless/pkg/tenant"
	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// Level is the permission a route needs (docs/security.md, "Permission
// levels"). Every route is registered with one; the route table is the
// one list infra derives API Gateway's JWT scopes and IAM policies from.
type Level string

const (
	// LevelAny needs a credential and no particular level: the manifest
	// and the health checks.
	LevelAny Level = "any"
	// LevelProducer pushes jobs and workflows, and reads, cancels and
	// activates them by id.
	LevelProducer Level = "producer"
	// LevelWorker fetches, acknowledges, fails and heartbeats jobs.
	LevelWorker Level = "worker"
	// LevelAdmin does everything: the Admin API, dead letter, queue
	// control, cron, events, metrics and the console.
	LevelAdmin Level = "admin"
)

// Levels are the levels a credential can hold.
var Levels = []Level{LevelProducer, LevelWorker, LevelAdmin}

// Scope is the JWT scope that grants l ("ojs/producer").
func (l Level) Scope() string { return "ojs/" + string(l) }

// Scopes are the JWT scopes any one of which admits a caller to a route
// of level l (API Gateway reads a route's scopes as any-of): l's own and
// admin's; none for LevelAny (any valid token).
func (l Level) Scopes() []string {
	switch l {
	case LevelAny:
		return nil
	case LevelAdmin:
		return []string{l.Scope()}
	}
	return []string{l.Scope(), LevelAdmin.Scope()}
}

// Allows reports whether a caller holding l may call a route of level need.
func (l Level) Allows(need Level) bool { return need == LevelAny || l == LevelAdmin || l == need }

// Route is one route of the API: a ServeMux pattern's method and path,
// and the level it needs.
type Route struct {
	Method, Pattern string
	Level           Level
}

// RouteTable returns s's routes with their levels, sorted as Routes.
func (s *Server) RouteTable() []Route {
	var out []Route
	for _, p := range s.Routes() {
		m, path, _ := strings.Cut(p, " ")
		out = append(out, Route{Method: m, Pattern: path, Level: s.patterns[p]})
	}
	return out
}

// AllRoutes is the route table of a server with every optional part (the
// Admin API, console, dead letter, workflows and cron), as the api
// function serves it. Nothing is called: the parts only register routes.
func AllRoutes() []Route {
	ad := admin.New(nil, nil, nil, nil, nil, admin.Config{Events: events.NewStore(nil, "")})
	con, err := console.New(console.Config{Admin: ad})
	if err != nil {
		panic(err)
	}
	return New(Services{Queues: (*queue.Service)(nil)}, nil, (*workflow.Engine)(nil), Config{Admin: ad, Console: con,
		DeadLetter: (*deadletter.Service)(nil), Crons: (*cron.Service)(nil), Schemas: (*schema.Registry)(nil),
		Webhooks: (*webhook.Store)(nil), Tenants: (*tenant.Registry)(nil), Checkpoints: (*checkpoint.Service)(nil)}).RouteTable()
}

// ParseTokens reads bearer tokens that each grant one level, written
// "level:token,level:token" (OJS_AUTH_TOKENS); a level may have several.
func ParseTokens(s string) (map[string]Level, error) {
	out := map[string]Level{}
	for i, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		lv, tok, _ := strings.Cut(kv, ":")
		if !slices.Contains(Levels, Level(lv)) || tok == "" {
			// The entry is not echoed: it may hold a token.
			return nil, fmt.Errorf("auth tokens: entry %d is not level:token with a level of %v", i+1, Levels)
		}
		out[tok] = Level(lv)
	}
	return out, nil
}

// checkAuth authenticates r and returns the level its credential holds:
// AuthToken holds admin, a token of Tokens its own level; with neither
// configured, every caller is admin.
func (s *Server) checkAuth(r *http.Request) (Level, error) {
	if s.cfg.AuthToken == "" && len(s.cfg.Tokens) == 0 {
		return LevelAdmin, nil
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	// Hashes of equal length, so the comparison does not reveal a token's
	// length either; every token is compared, so neither which one matched.
	sent := sha256.Sum256([]byte(got))
	var lv Level
	for tok, l := range s.cfg.Tokens {
		if equal(sent, tok) {
			lv = l
		}
	}
	if s.cfg.AuthToken != "" && equal(sent, s.cfg.AuthToken) {
		lv = LevelAdmin
	}
	if !ok || lv == "" {
		return "", ojserr.New(ojserr.Unauthenticated, "Missing or invalid bearer token.")
	}
	return lv, nil
}

func equal(sent [32]byte, token string) bool {
	want := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sent[:], want[:]) == 1
}

// authorize refuses a caller holding lv a route that needs more.
func authorize(lv, need Level) error {
	if lv.Allows(need) {
		return nil
	}
	return ojserr.Newf(ojserr.PermissionDenied, "This route needs the %s level; the credential sent holds %s.", need, lv).
		With("required_level", string(need)).With("required_scopes", need.Scopes())
}
