package wfdef_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
)

// The official SDKs send chains, groups and batches in the steps form;
// they parse as what they are.
func TestStepsFormRecognisesSDKShapes(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct{ name, body, kind string }{
		{"go batch", `{"steps":[{"id":"job-0","type":"go.export","args":[{"f":"x"}],"depends_on":[]},{"id":"job-1","type":"go.export","args":[{"f":"y"}],"depends_on":[]},
			{"id":"on-complete","type":"go.batch.report","args":[],"depends_on":["job-0","job-1"]},{"id":"on-success","type":"go.batch.success","args":[],"depends_on":["job-0","job-1"]}],"options":{"queue":"sdk-go"}}`, "batch"},
		{"python batch", `{"name":"p","steps":[{"id":"step-0","type":"py.a","args":[1],"depends_on":[]},{"id":"step-1","type":"py.a","args":[2],"depends_on":[]},
			{"id":"on_failure","type":"py.alert","args":[],"depends_on":["step-0","step-1"],"options":{"callback_type":"on_failure"}}]}`, "batch"},
		{"chain", `{"name":"c","steps":[{"id":"step-0","type":"a.a","args":[],"depends_on":[]},{"id":"step-1","type":"a.b","args":[],"depends_on":["step-0"]},{"id":"step-2","type":"a.c","args":[],"depends_on":["step-1"]}]}`, "chain"},
		{"chain listed out of order", `{"steps":[{"id":"2","type":"a.c","args":[],"depends_on":["1"]},{"id":"0","type":"a.a","args":[],"depends_on":[]},{"id":"1","type":"a.b","args":[],"depends_on":["0"]}]}`, "chain"},
		{"group", `{"name":"g","steps":[{"id":"job-0","type":"a.a","args":[],"depends_on":[]},{"id":"job-1","type":"a.b","args":[]}]}`, "group"},
		{"graph", `{"steps":[{"id":"a","type":"a.a","args":[],"depends_on":[]},{"id":"b","type":"a.b","args":[],"depends_on":["a"]},{"id":"c","type":"a.c","args":[],"depends_on":["a"]}]}`, "graph"},
	} {
		p, err := wfdef.Parse([]byte(tc.body), now)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Root.Kind != tc.kind || p.Form != "steps" {
			t.Fatalf("%s: parsed as %s", tc.name, p.Root.Kind)
		}
		if tc.name == "chain listed out of order" && p.Root.Children[0].StepID != "0" {
			t.Fatalf("chain order: %+v", p.Root.Children[0])
		}
		if tc.kind == "batch" {
			for name, cb := range p.Root.Callbacks {
				var req map[string]any
				_ = json.Unmarshal(cb.Request, &req)
				if opts, _ := req["options"].(map[string]any); opts != nil && opts["callback_type"] != nil {
					t.Fatalf("%s: callback %s keeps callback_type in its job: %s", tc.name, name, cb.Request)
				}
			}
			if len(p.Root.Children) != 2 || p.Jobs != 2 {
				t.Fatalf("%s: %d jobs", tc.name, len(p.Root.Children))
			}
		}
	}
}

func TestStepsFormValidation(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct{ body, want string }{
		{`{"steps":[]}`, `$.steps: steps array must contain at least one element`},
		{`{"steps":[{"id":"a","type":"a.a","args":[],"depends_on":["b"]},{"id":"b","type":"a.b","args":[],"depends_on":["c"]},{"id":"c","type":"a.c","args":[],"depends_on":["a"]}]}`, `a -> b -> c -> a`},
		{`{"steps":[{"id":"a","type":"a.a","args":[],"depends_on":["zz"]}]}`, `$.steps[0].depends_on[0]: unknown step "zz"`},
		{`{"steps":[{"id":"a","type":"a.a","args":[],"depends_on":["a"]}]}`, `depends on itself`},
		{`{"steps":[{"id":"a","type":"a.a","args":[]},{"id":"a","type":"a.b","args":[]}]}`, `$.steps[1].id: duplicate step id "a"`},
		{`{"steps":[{"id":"","type":"a.a","args":[]},{"type":"a.b","args":[]}]}`, `$.steps[1].id: is required`},
		{`{"steps":[{"id":"a","type":"BAD","args":[]}]}`, `$.steps[0].type`},
		{`{"steps":[{"id":"a","type":"a.a","args":[],"options":{"callback_type":"on_complete"}}]}`, `callback_type`},
	} {
		_, err := wfdef.Parse([]byte(tc.body), now)
		e := ojserr.As(err)
		ps, _ := e.Details["validation_errors"].([]wfdef.Problem)
		var lines []string
		for _, p := range ps {
			lines = append(lines, p.Path+": "+p.Message)
		}
		if e.Code != ojserr.InvalidWorkflow || !strings.Contains(strings.Join(lines, "\n"), tc.want) {
			t.Fatalf("%s: %v %v, want %q", tc.body, err, lines, tc.want)
		}
	}
	// Limits.
	var many []string
	for i := 0; i <= wfdef.MaxGraphSteps; i++ {
		dep := ""
		if i > 1 {
			dep = fmt.Sprintf(`"s%d","s%d"`, i-1, i-2)
		}
		many = append(many, fmt.Sprintf(`{"id":"s%d","type":"a.a","args":[],"depends_on":[%s]}`, i, dep))
	}
	_, err := wfdef.Parse([]byte(`{"steps":[`+strings.Join(many, ",")+`]}`), now)
	if e := ojserr.As(err); e.Code != ojserr.InvalidWorkflow || !strings.Contains(e.Message, "at most 2000 steps") {
		t.Fatalf("too many graph steps: %v", err)
	}
}

func TestControlValidation(t *testing.T) {
	t.Parallel()
	now := time.Now()
	leaf := `{"type":"a.b","args":[]}`
	for _, tc := range []struct{ body, want string }{
		{`{"type":"chain","timeout_ms":0,"steps":[` + leaf + `]}`, `$.timeout_ms`},
		{`{"type":"chain","timeout_ms":"5s","steps":[` + leaf + `]}`, `$.timeout_ms`},
		{`{"type":"chain","steps":[{"type":"group","timeout_ms":-1,"jobs":[` + leaf + `]}]}`, `$.steps[0].timeout_ms`},
		{`{"type":"chain","steps":[{"type":"a.b","args":[],"compensate":{"type":"group","jobs":[` + leaf + `]}}]}`, `$.steps[0].compensate`},
		{`{"type":"chain","steps":[{"type":"a.b","args":[],"compensate":{"type":"Bad","args":[]}}]}`, `$.steps[0].compensate.type`},
		{`{"type":"chain","steps":[` + leaf + `],"on_failure":{"type":"group","jobs":[` + leaf + `]}}`, `$.on_failure`},
		{`{"type":"chain","steps":[` + leaf + `],"on_cancel":{"type":"chain","steps":[{"type":"group","jobs":[` + leaf + `]}]}}`, `$.on_cancel.steps[0]`},
		{`{"type":"chain","steps":[{"type":"group","on_failure":` + leaf + `,"jobs":[` + leaf + `]}]}`, `$.steps[0]`},
		{`{"timeout_ms":-5,"steps":[{"id":"a","type":"a.b","args":[],"depends_on":[]}]}`, `$.timeout_ms`},
	} {
		_, err := wfdef.Parse([]byte(tc.body), now)
		e := ojserr.As(err)
		ps, _ := e.Details["validation_errors"].([]wfdef.Problem)
		found := false
		for _, p := range ps {
			found = found || p.Path == tc.want
		}
		if e.Code != ojserr.InvalidWorkflow || !found {
			t.Fatalf("%s: %v %v, want a problem at %s", tc.body, err, ps, tc.want)
		}
	}
	var many []string
	for i := 0; i <= wfdef.MaxCompensations; i++ {
		many = append(many, `{"type":"a.b","args":[],"compensate":{"type":"a.undo","args":[]}}`)
	}
	_, err := wfdef.Parse([]byte(`{"type":"group","jobs":[`+strings.Join(many, ",")+`]}`), now)
	if e := ojserr.As(err); e.Code != ojserr.InvalidWorkflow || !strings.Contains(e.Message, "compensate") {
		t.Fatalf("too many compensations: %v", err)
	}
	p, err := wfdef.Parse([]byte(`{"type":"chain","timeout_ms":5000,"steps":[{"type":"a.b","args":[],"compensate":{"type":"a.undo","args":[1]}}],
		"on_failure":{"type":"chain","steps":[`+leaf+`,`+leaf+`]},"on_cancel":`+leaf+`}`), now)
	if err != nil || p.Root.TimeoutMS != 5000 || len(p.Root.Children[0].Compensate) == 0 || p.Root.Handlers["on_failure"].Kind != "chain" ||
		p.Root.Handlers["on_cancel"].Kind != "job" || p.Jobs != 1 || strings.Contains(string(p.Root.Children[0].Request), "compensate") {
		t.Fatalf("valid control fields: %+v %v", p, err)
	}
}

// A workflow with a job geo-pinned to another region, at any depth and in
// a callback or compensation too, is refused with the job's path; one
// pinned here, or any workflow where the deployment names no region, is
// taken.
func TestCheckPins(t *testing.T) {
	pin := func(region string) string {
		return `"meta":{"ojs.federation.region_affinity":"geo-pin","ojs.federation.region":"` + region + `"}`
	}
	for _, c := range []struct {
		def, region, path string
	}{
		{`{"type":"chain","steps":[{"type":"a.b","args":[]},{"type":"a.c","args":[],` + pin("eu-west-1") + `}]}`, "us-east-1", "/s1"},
		{`{"type":"group","jobs":[{"type":"chain","steps":[{"type":"a.b","args":[],` + pin("eu-west-1") + `}]}]}`, "us-east-1", "/j0/s0"},
		{`{"type":"batch","jobs":[{"type":"a.b","args":[]}],"callbacks":{"on_complete":{"type":"a.cb","args":[],` + pin("eu-west-1") + `}}}`, "us-east-1", "on_complete"},
		{`{"type":"chain","steps":[{"type":"a.c","args":[],` + pin("eu-west-1") + `}]}`, "eu-west-1", ""},
		{`{"type":"chain","steps":[{"type":"a.c","args":[],` + pin("eu-west-1") + `}]}`, "", ""},
	} {
		p, err := wfdef.Parse([]byte(c.def), time.Now())
		if err != nil {
			t.Fatalf("%s: %v", c.def, err)
		}
		err = p.CheckPins(c.region)
		if c.path == "" {
			if err != nil {
				t.Errorf("%s in %q: %v", c.def, c.region, err)
			}
			continue
		}
		oe := ojserr.As(err)
		if err == nil || oe.Status() != 422 || !strings.Contains(fmt.Sprint(oe.Details["path"]), c.path) {
			t.Errorf("%s in %q: %v (details %v), want a 422 at %s", c.def, c.region, err, oe.Details, c.path)
		}
	}
}
