package ojsconstruct

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
)

// The dead letter purge routes: no producer or worker may reach them.
var purgeRoutes = []string{"DELETE /ojs/v1/dead-letter", "DELETE /ojs/v1/admin/dead-letter"}

// routesByKey returns the template's HTTP API routes by route key.
func (s *synthesized) routesByKey() map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, r := range s.resources("AWS::ApiGatewayV2::Route") {
		out[props(r)["RouteKey"].(string)] = props(r)
	}
	return out
}

// tableRoutes are the api function's routes that have an HTTP API route
// of their own (a pattern ending in {$} is served by the catch-all).
func tableRoutes() []httpapi.Route {
	return slices.DeleteFunc(httpapi.AllRoutes(), func(rt httpapi.Route) bool { return strings.HasSuffix(rt.Pattern, "{$}") })
}

// On an IAM stage every route of the table has its own IAM-authorised
// route, and the three managed policies, exported as outputs, grant
// execute-api:Invoke such that a request to each route (its path
// parameters filled in) is allowed by exactly the levels that may call
// it: the producer policy does not cover the dead letter purge.
func TestPermissionPoliciesPerLevel(t *testing.T) {
	s := synthEnv(t, "dev")
	routes := s.routesByKey()
	if len(routes) != 1+len(tableRoutes()) || routes["ANY "+APIRoutePath] == nil {
		t.Fatalf("%d routes, want the catch-all and %d", len(routes), len(tableRoutes()))
	}
	for key, r := range routes {
		if r["AuthorizationType"] != "AWS_IAM" || r["AuthorizationScopes"] != nil {
			t.Errorf("%s: %v", key, r)
		}
	}
	policies := s.resources("AWS::IAM::ManagedPolicy")
	outputs := s.doc["Outputs"].(map[string]any)
	allow := map[httpapi.Level][]*regexp.Regexp{}
	var api string
	for _, lv := range httpapi.Levels {
		out, _ := outputs[PolicyOutput(lv)].(map[string]any)
		p := policies[refID(out["Value"])]
		if p == nil {
			t.Fatalf("output %s names no managed policy: %v", PolicyOutput(lv), out)
		}
		for _, st := range props(p)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			st := st.(map[string]any)
			if st["Effect"] != "Allow" || st["Action"] != "execute-api:Invoke" {
				t.Fatalf("%s policy: %v", lv, st)
			}
			for _, res := range strList(st["Resource"]) {
				// arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<HttpApi...>/<stage>/<METHOD>/<path>
				api, _, _ = strings.Cut(res, ">/")
				allow[lv] = append(allow[lv], regexp.MustCompile("^"+strings.ReplaceAll(regexp.QuoteMeta(res), `\*`, ".*")+"$"))
			}
		}
	}
	if len(policies) != len(httpapi.Levels) {
		t.Fatalf("%d managed policies, want %d", len(policies), len(httpapi.Levels))
	}
	for _, rt := range httpapi.AllRoutes() {
		key := rt.Method + " " + rt.Pattern
		if r := routes[key]; r == nil && !strings.HasSuffix(rt.Pattern, "{$}") {
			t.Errorf("no HTTP API route %s", key)
		}
		request := api + ">/$default/" + rt.Method + strings.ReplaceAll(InvokePath(rt.Pattern), "*", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
		for _, lv := range httpapi.Levels {
			allowed := slices.ContainsFunc(allow[lv], func(re *regexp.Regexp) bool { return re.MatchString(request) })
			if allowed != lv.Allows(rt.Level) {
				t.Errorf("%s policy allows %s: %v; the route needs %s", lv, request, allowed, rt.Level)
			}
			if allowed && lv == httpapi.LevelProducer && slices.Contains(purgeRoutes, key) {
				t.Errorf("the producer policy covers the purge %s", key)
			}
		}
	}
}

// On a JWT stage every route carries its level's scopes (the route's own
// and admin's, any of which admits; none for the manifest and health),
// the catch-all admin's, and no managed policy is created: the producer
// scope does not open the dead letter purge.
func TestPermissionJWTScopes(t *testing.T) {
	s := synthCustom(t)
	routes := s.routesByKey()
	if len(routes) != 1+len(tableRoutes()) {
		t.Fatalf("%d routes, want %d", len(routes), 1+len(tableRoutes()))
	}
	if got := strList(routes["ANY "+APIRoutePath]["AuthorizationScopes"]); !slices.Equal(got, []string{"ojs/admin"}) {
		t.Errorf("catch-all scopes %v", got)
	}
	for _, rt := range tableRoutes() {
		key := rt.Method + " " + rt.Pattern
		r := routes[key]
		if got := strList(r["AuthorizationScopes"]); r["AuthorizationType"] != "JWT" || !slices.Equal(got, rt.Level.Scopes()) {
			t.Errorf("%s (%s): %v scopes %v", key, rt.Level, r["AuthorizationType"], got)
		}
	}
	for _, key := range purgeRoutes {
		if got := strList(routes[key]["AuthorizationScopes"]); !slices.Equal(got, []string{"ojs/admin"}) {
			t.Errorf("%s scopes %v", key, got)
		}
	}
	if n := len(s.resources("AWS::IAM::ManagedPolicy")); n != 0 {
		t.Errorf("%d managed policies on a JWT stage", n)
	}
}
