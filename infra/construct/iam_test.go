package ojsconstruct

import (
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// xrayActions are the only actions allowed on Resource "*": X-Ray has no
// resource-level permissions.
var xrayActions = []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}

type statement struct {
	Effect    string
	Actions   []string
	Resources []string
}

// statements returns every statement of every AWS::IAM::Policy attached to
// the role with the given logical id.
func (s *synthesized) statements(t *testing.T, role string) []statement {
	t.Helper()
	var out []statement
	for id, pol := range s.resources("AWS::IAM::Policy") {
		p := props(pol)
		attached := false
		for _, r := range p["Roles"].([]any) {
			if refID(r) == role {
				attached = true
			}
		}
		if !attached {
			continue
		}
		doc := p["PolicyDocument"].(map[string]any)
		for _, st := range doc["Statement"].([]any) {
			m := st.(map[string]any)
			if _, ok := m["NotAction"]; ok {
				t.Errorf("policy %s uses NotAction", id)
			}
			if _, ok := m["NotResource"]; ok {
				t.Errorf("policy %s uses NotResource", id)
			}
			out = append(out, statement{
				Effect:    m["Effect"].(string),
				Actions:   strList(m["Action"]),
				Resources: strList(m["Resource"]),
			})
		}
	}
	return out
}

// roleOf returns the logical id of the execution role of a function.
func (s *synthesized) roleOf(t *testing.T, fn string) string {
	t.Helper()
	id := s.byTag(t, "AWS::Lambda::Function", TagFunction, fn)
	return refID(props(s.resources("AWS::Lambda::Function")[id])["Role"])
}

func TestIAMHasNoWildcards(t *testing.T) {
	for _, name := range topology.Environments {
		t.Run(name, func(t *testing.T) {
			s := synthEnv(t, name)
			tracing := mustEnv(t, name).Tracing
			policies := s.resources("AWS::IAM::Policy")
			if len(policies) != len(topology.FunctionNames) {
				t.Errorf("want one policy per function role, found %d", len(policies))
			}
			for _, fn := range topology.FunctionNames {
				sawXRay := false
				for _, st := range s.statements(t, s.roleOf(t, fn)) {
					if st.Effect != "Allow" {
						t.Errorf("%s: unexpected %s statement %v", fn, st.Effect, st)
					}
					for _, a := range st.Actions {
						if a == "*" || strings.HasSuffix(a, ":*") {
							t.Errorf("%s: wildcard action %q", fn, a)
						}
					}
					for _, r := range st.Resources {
						if r != "*" {
							continue
						}
						acts := append([]string(nil), st.Actions...)
						sort.Strings(acts)
						if strings.Join(acts, ",") != strings.Join(xrayActions, ",") {
							t.Errorf("%s: Resource \"*\" for %v (only X-Ray may use it)", fn, st.Actions)
						}
						sawXRay = true
					}
				}
				if sawXRay != tracing {
					t.Errorf("%s: X-Ray statement present = %v, tracing = %v", fn, sawXRay, tracing)
				}
			}
		})
	}
}

// names maps the logical ids of the stack's resources to readable names
// (table, bus, queue:<name>, dlq:<name>, stream-failure, logs:<fn>), so
// expected permissions can be written without logical-id hashes.
func (s *synthesized) names(t *testing.T, env topology.Env) map[string]string {
	t.Helper()
	n := map[string]string{
		refID(s.doc["Outputs"].(map[string]any)[OutputTableName].(map[string]any)["Value"]):    "table",
		refID(s.doc["Outputs"].(map[string]any)[OutputEventBusName].(map[string]any)["Value"]): "bus",
		s.byTag(t, "AWS::SQS::Queue", TagQueueRole, QueueRoleStreamFailure):                    "stream-failure",
	}
	for _, q := range env.Queues {
		n[s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRolePush)] = "queue:" + q.Name
		n[s.byTag(t, "AWS::SQS::Queue", TagQueue, q.Name, TagQueueRole, QueueRoleDeadLetter)] = "dlq:" + q.Name
	}
	for _, fn := range topology.FunctionNames {
		id := s.byTag(t, "AWS::Lambda::Function", TagFunction, fn)
		lg := props(s.resources("AWS::Lambda::Function")[id])["LoggingConfig"].(map[string]any)["LogGroup"]
		n[refID(lg)] = "logs:" + fn
	}
	return n
}

var refPattern = regexp.MustCompile(`<([A-Za-z0-9]+)((?:\.[A-Za-z]+)?)>`)

// grants renders a role's permissions as sorted "action resource" lines
// with logical ids replaced by readable names.
func (s *synthesized) grants(t *testing.T, role string, names map[string]string) []string {
	t.Helper()
	var out []string
	for _, st := range s.statements(t, role) {
		for _, a := range st.Actions {
			for _, r := range st.Resources {
				r = refPattern.ReplaceAllStringFunc(r, func(m string) string {
					sub := refPattern.FindStringSubmatch(m)
					name, ok := names[sub[1]]
					if !ok {
						t.Errorf("role %s: %s refers to unexpected resource %s", role, a, sub[1])
						name = sub[1]
					}
					return "<" + name + sub[2] + ">"
				})
				out = append(out, a+" "+r)
			}
		}
	}
	sort.Strings(out)
	return dedupe(out)
}

func dedupe(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// wantGrants is the least-privilege contract of docs/infrastructure.md.
func wantGrants(env topology.Env, fn string) []string {
	var g []string
	add := func(resource string, actions ...string) {
		for _, a := range actions {
			g = append(g, a+" "+resource)
		}
	}
	add("<logs:"+fn+".Arn>", "logs:CreateLogStream", "logs:PutLogEvents")
	add("<table.Arn>", TableActions...)
	add("<table.Arn>/index/*", TableActions...)
	if env.Tracing {
		add("*", xrayActions...)
	}
	send := []string{"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
	consume := []string{"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
	switch fn {
	case topology.FunctionWorker:
		for _, q := range env.Queues {
			add("<queue:"+q.Name+".Arn>", send...)
			add("<queue:"+q.Name+".Arn>", consume...)
		}
	case topology.FunctionStream:
		for _, q := range env.Queues {
			add("<queue:"+q.Name+".Arn>", send...)
		}
		add("<bus.Arn>", "events:PutEvents")
		add("<table.StreamArn>", "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")
		add("<table.Arn>/stream/*", "dynamodb:ListStreams")
		add("<stream-failure.Arn>", send...)
	case topology.FunctionSweeper:
		for _, q := range env.Queues {
			add("<queue:"+q.Name+".Arn>", send...)
		}
	}
	sort.Strings(g)
	return dedupe(g)
}

func TestIAMLeastPrivilegePerFunction(t *testing.T) {
	cases := map[string]func(*testing.T) (*synthesized, topology.Env){
		"dev":        func(t *testing.T) (*synthesized, topology.Env) { return synthEnv(t, "dev"), mustEnv(t, "dev") },
		"local":      func(t *testing.T) (*synthesized, topology.Env) { return synthEnv(t, "local"), mustEnv(t, "local") },
		"two queues": func(t *testing.T) (*synthesized, topology.Env) { return synthCustom(t), customEnv(t) },
		"prod":       func(t *testing.T) (*synthesized, topology.Env) { return synthEnv(t, "prod"), mustEnv(t, "prod") },
		"staging":    func(t *testing.T) (*synthesized, topology.Env) { return synthEnv(t, "staging"), mustEnv(t, "staging") },
	}
	for _, name := range sortedKeys(cases) {
		t.Run(name, func(t *testing.T) {
			s, env := cases[name](t)
			names := s.names(t, env)
			for _, fn := range topology.FunctionNames {
				got := s.grants(t, s.roleOf(t, fn), names)
				want := wantGrants(env, fn)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s role grants:\n%s\nwant:\n%s", fn, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}
