package ojsconstruct

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// assetRoot holds placeholder bootstrap files so the tests synthesise
// without built binaries.
var assetRoot string

func TestMain(m *testing.M) {
	// The jsii Node.js process starts during package initialisation, so
	// its Node-version banner can only be silenced from the environment of
	// `go test` (infra/infra.mk exports JSII_SILENCE_WARNING_*).
	dir, err := os.MkdirTemp("", "ojs-assets-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := writeAssets(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	assetRoot = dir
	// Start the jsii runtime before parallel tests race to start it.
	awscdk.NewApp(nil)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func writeAssets(root string) error {
	for _, fn := range topology.FunctionNames {
		d := filepath.Join(root, fn)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, BootstrapName), []byte("placeholder "+fn), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// The jsii runtime behind the CDK is not safe for concurrent use (objects
// created on one goroutine go missing on another), so tests that touch CDK
// objects do not call t.Parallel.

// synthesized is one synthesised stack: the assertions template and its
// JSON decoded into plain Go values for the checks assertions cannot express.
type synthesized struct {
	template assertions.Template
	doc      map[string]any
	// nag holds cdk-nag's AwsSolutions findings that no suppression
	// covers: "<level> <construct path>: <message>".
	nag []string
}

// resources returns the template's resources of one CloudFormation type,
// keyed by logical id.
func (s *synthesized) resources(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.doc["Resources"].(map[string]any) {
		res := r.(map[string]any)
		if res["Type"] == typ {
			out[id] = res
		}
	}
	return out
}

func props(res map[string]any) map[string]any {
	p, _ := res["Properties"].(map[string]any)
	return p
}

// tagValue returns the value of a resource's tag, or "".
func tagValue(res map[string]any, key string) string {
	tags, _ := props(res)["Tags"].([]any)
	for _, t := range tags {
		m := t.(map[string]any)
		if m["Key"] == key {
			s, _ := m["Value"].(string)
			return s
		}
	}
	return ""
}

// byTag returns the logical id of the single resource of typ whose tags
// include all given key/value pairs.
func (s *synthesized) byTag(t *testing.T, typ string, kv ...string) string {
	t.Helper()
	var ids []string
	for id, res := range s.resources(typ) {
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if tagValue(res, kv[i]) != kv[i+1] {
				ok = false
			}
		}
		if ok {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("want one %s tagged %v, found %v", typ, kv, ids)
	}
	return ids[0]
}

// refID returns the logical id a {"Ref": id} or {"Fn::GetAtt": [id, ...]}
// value points at, or "".
func refID(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if r, ok := m["Ref"].(string); ok {
		return r
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
		s, _ := ga[0].(string)
		return s
	}
	return ""
}

// flatten renders a CloudFormation value as a string: literals as is, Ref
// and GetAtt as <id> or <id.Attr>, Fn::Join concatenated. It lets tests
// read joined strings such as OJS_PUSH_QUEUES.
func flatten(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return fmt.Sprint(x)
	case map[string]any:
		if r, ok := x["Ref"].(string); ok {
			return "<" + r + ">"
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok {
			parts := make([]string, len(ga))
			for i, p := range ga {
				parts[i] = fmt.Sprint(p)
			}
			return "<" + strings.Join(parts, ".") + ">"
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			items, _ := j[1].([]any)
			parts := make([]string, len(items))
			for i, it := range items {
				parts[i] = flatten(it)
			}
			return strings.Join(parts, sep)
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// strList returns a CloudFormation value that is a string or list of
// strings as a list.
func strList(v any) []string {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, flatten(e))
		}
		return out
	default:
		return []string{flatten(x)}
	}
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mustEnv(t *testing.T, name string) topology.Env {
	t.Helper()
	e, err := topology.ForEnv(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// synth builds a stack the way infra/app does and returns its template.
func synth(t *testing.T, p Props) *synthesized {
	t.Helper()
	if p.AssetRoot == "" {
		p.AssetRoot = assetRoot
	}
	app := awscdk.NewApp(nil)
	// cdk-nag runs on every synthesis, as in the app.
	awscdk.Aspects_Of(app).Add(NagChecks(false), nil)
	stack, _, err := NewStack(app, "Test", &StackProps{
		StackProps: awscdk.StackProps{Env: &awscdk.Environment{
			Account: jsii.String("123456789012"),
			Region:  jsii.String("eu-west-1"),
		}},
		OJS: p,
	})
	if err != nil {
		t.Fatalf("NewStack: %v", err)
	}
	tpl := assertions.Template_FromStack(stack, nil)
	raw, err := json.Marshal(tpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	s := &synthesized{template: tpl, nag: nagFindings(stack)}
	if err := json.Unmarshal(raw, &s.doc); err != nil {
		t.Fatal(err)
	}
	return s
}

// nagFindings returns the unsuppressed AwsSolutions errors and warnings
// cdk-nag attached to the stack's constructs.
func nagFindings(stack awscdk.Stack) []string {
	ann := assertions.Annotations_FromStack(stack)
	rule := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	var out []string
	for level, msgs := range map[string]*[]*cxapi.SynthesisMessage{
		"error":   ann.FindError(jsii.String("*"), rule),
		"warning": ann.FindWarning(jsii.String("*"), rule),
	} {
		for _, m := range *msgs {
			out = append(out, fmt.Sprintf("%s %s: %v", level, *m.Id, m.Entry.Data))
		}
	}
	sort.Strings(out)
	return out
}

var (
	envCacheMu sync.Mutex
	envCache   = map[string]*synthesized{}
)

// synthEnv returns the (cached) template of a named environment with
// default props. Synthesis goes through the jsii runtime and takes seconds,
// so each environment is synthesised once per test binary.
func synthEnv(t *testing.T, name string) *synthesized {
	t.Helper()
	envCacheMu.Lock()
	defer envCacheMu.Unlock()
	if s, ok := envCache[name]; ok {
		return s
	}
	s := synth(t, Props{Env: mustEnv(t, name)})
	envCache[name] = s
	return s
}

// evaluate computes a CloudFormation value the way CloudFormation would,
// with Ref and Fn::GetAtt answered from attrs ("<id>" or "<id>.<Attr>").
// It supports the intrinsics the stack uses in outputs and variables.
func evaluate(t *testing.T, v any, attrs map[string]string) any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	lookup := func(key string) string {
		val, ok := attrs[key]
		if !ok {
			t.Fatalf("evaluate: no value for %s", key)
		}
		return val
	}
	switch {
	case m["Ref"] != nil:
		return lookup(m["Ref"].(string))
	case m["Fn::GetAtt"] != nil:
		ga := m["Fn::GetAtt"].([]any)
		return lookup(ga[0].(string) + "." + ga[1].(string))
	case m["Fn::Join"] != nil:
		j := m["Fn::Join"].([]any)
		var parts []string
		for _, it := range j[1].([]any) {
			parts = append(parts, evaluate(t, it, attrs).(string))
		}
		return strings.Join(parts, j[0].(string))
	case m["Fn::Split"] != nil:
		sp := m["Fn::Split"].([]any)
		var out []any
		for _, p := range strings.Split(evaluate(t, sp[1], attrs).(string), sp[0].(string)) {
			out = append(out, p)
		}
		return out
	case m["Fn::Select"] != nil:
		sel := m["Fn::Select"].([]any)
		return evaluate(t, sel[1], attrs).([]any)[int(sel[0].(float64))]
	}
	t.Fatalf("evaluate: unsupported %v", m)
	return nil
}

// aliasRefs returns the renderings (as flatten gives them) that name the
// live alias of function fn: a Ref to the alias resource (its ARN), or
// the function's name or ARN with the ":live" qualifier.
func (s *synthesized) aliasRefs(t *testing.T, fn string) []string {
	t.Helper()
	fnID := s.byTag(t, "AWS::Lambda::Function", TagFunction, fn)
	var out []string
	for id, a := range s.resources("AWS::Lambda::Alias") {
		if refID(props(a)["FunctionName"]) == fnID && props(a)["Name"] == AliasName {
			out = append(out, "<"+id+">")
		}
	}
	if len(out) != 1 {
		t.Fatalf("function %s has %d %s aliases", fn, len(out), AliasName)
	}
	return append(out, "<"+fnID+">:"+AliasName, "<"+fnID+".Arn>:"+AliasName)
}

// invokesAlias fails the test unless v names fn's live alias.
func (s *synthesized) invokesAlias(t *testing.T, what string, v any, fn string) {
	t.Helper()
	got := flatten(v)
	refs := s.aliasRefs(t, fn)
	for _, r := range refs {
		if got == r {
			return
		}
	}
	// The function name taken from the alias ARN, with the qualifier:
	// {"Fn::Select":[6,{"Fn::Split":[":",{"Ref":"<alias>"}]}]}:live.
	alias := strings.Trim(refs[0], "<>")
	if strings.Contains(got, `{"Ref":"`+alias+`"}`) && strings.HasSuffix(got, ":"+AliasName) {
		return
	}
	t.Errorf("%s targets %s, want the %s alias of %s (%v)", what, got, AliasName, fn, s.aliasRefs(t, fn))
}
