package wfdef_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
)

// FuzzParseWorkflow fuzzes the workflow creation body (POST /ojs/v1/workflows):
// any input is a valid tree or a 4xx OJS error, never a panic. Seeds are
// the workflow examples of the OJS specification (testdata/seeds, named
// <spec file>-<section>-<n>.json) and hand-written edge cases.
func FuzzParseWorkflow(f *testing.F) {
	files, _ := filepath.Glob("testdata/seeds/*.json")
	if len(files) == 0 {
		f.Fatal("no seeds in testdata/seeds")
	}
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	leaf := `{"type":"a.b","args":[1]}`
	for _, s := range []string{
		``, `null`, `[]`, `{}`, `{"type":"chain"}`, `{"type":"chain","steps":[]}`, `{"type":"chain","steps":{}}`,
		`{"type":"chain","steps":[` + leaf + `,` + leaf + `]}`,
		`{"type":"group","name":"g","jobs":[` + leaf + `,{"type":"chain","steps":[` + leaf + `]}]}`,
		`{"type":"batch","jobs":[` + leaf + `],"callbacks":{"on_complete":` + leaf + `,"on_success":` + leaf + `,"on_failure":` + leaf + `}}`,
		`{"type":"batch","jobs":[` + leaf + `],"callbacks":{"on_nothing":` + leaf + `}}`,
		`{"type":"batch","jobs":[` + leaf + `],"callbacks":{"on_complete":{"type":"group","jobs":[` + leaf + `]}}}`,
		`{"type":"group","jobs":[` + leaf + `],"callbacks":{}}`,
		`{"type":"chain","steps":[{"type":"group","jobs":[{"type":"chain","steps":[{"type":"batch","jobs":[{"type":"group","jobs":[{"type":"chain","steps":[` + leaf + `]}]}],"callbacks":{"on_complete":` + leaf + `}}]}]}]}`,
		`{"type":"chain","id":"019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6","steps":[` + leaf + `]}`,
		`{"type":"chain","id":"nope","steps":[` + leaf + `]}`,
		`{"type":"chain","steps":[{"type":"a.b","args":[],"id":"019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"}]}`,
		`{"type":"chain","steps":[{"type":"a.b","args":[],"options":{"pending":true}}]}`,
		`{"type":"chain","steps":[{"type":"a.b","args":"x"},{"type":"Bad Type","args":[]},7,null]}`,
		`{"type":"chain","name":"` + strings.Repeat("n", 300) + `","steps":[` + leaf + `]}`,
		`{"type":"chain","name":"` + strings.Repeat("n", wfdef.MaxNameLength+1) + `","steps":[` + leaf + `]}`,
		`{"type":"chain","Type":"group","steps":[` + leaf + `],"STEPS":[]}`,
		"{\"type\":\"chain\",\"name\":\"\xff\x00\",\"steps\":[" + leaf + "]}",
		leaf,
		`{"name":"g","steps":[{"id":"a","type":"a.b","args":[],"depends_on":[]},{"id":"b","type":"a.b","args":[],"depends_on":["a"]},{"id":"c","type":"a.b","args":[],"depends_on":["a"]},{"id":"d","type":"a.b","args":[],"depends_on":["b","c"]}]}`,
		`{"steps":[{"id":"a","type":"a.b","args":[],"depends_on":["b"]},{"id":"b","type":"a.b","args":[],"depends_on":["a"]}]}`,
		`{"steps":[{"id":"job-0","type":"a.b","args":[],"depends_on":[]},{"id":"on-complete","type":"c.d","args":[],"depends_on":["job-0"]}],"options":{"queue":"q"}}`,
		`{"name":"p","steps":[{"id":"step-0","type":"a.b","args":[1],"depends_on":[]},{"id":"on_failure","type":"c.d","args":[],"depends_on":["step-0"],"options":{"callback_type":"on_failure"}}]}`,
		`{"steps":[{"id":"a","type":"a.b","args":[],"depends_on":["a","zz",""]},{"id":"a","type":"a.b"},{"type":"a.b","args":[]}]}`,
		`{"type":"graph","steps":[]}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 3, 15, 9, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw []byte) {
		parsed, err := wfdef.Parse(raw, now)
		if err != nil {
			var oe *ojserr.Error
			if !errors.As(err, &oe) {
				t.Fatalf("rejection is not an *ojserr.Error: %T %v", err, err)
			}
			if s := oe.Status(); s < 400 || s > 499 || oe.Message == "" || oe.Retryable {
				t.Fatalf("rejection with status %d: %+v", s, oe)
			}
			if oe.Code == ojserr.InvalidWorkflow {
				ps, _ := oe.Details["validation_errors"].([]wfdef.Problem)
				if len(ps) == 0 || len(ps) > 100 {
					t.Fatalf("invalid_workflow with %d problems", len(ps))
				}
			}
			return
		}
		def, id, n := parsed.Root, parsed.ID, parsed.Jobs
		if def == nil || n < 1 || n > wfdef.MaxJobs {
			t.Fatalf("accepted with def %v and %d jobs", def, n)
		}
		if id != "" && job.ValidateID(id) != nil {
			t.Fatalf("accepted workflow id %q", id)
		}
		if id == "" {
			id = "019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"
		}
		paths, ids := map[string]bool{}, map[string]string{}
		leaves := 0
		var check func(d *wfdef.Def, depth int)
		check = func(d *wfdef.Def, depth int) {
			if paths[d.Path] {
				t.Fatalf("two nodes at path %s", d.Path)
			}
			paths[d.Path] = true
			jid := wfdef.JobID(id, d.Path)
			if job.ValidateID(jid) != nil {
				t.Fatalf("job id %q of %s is not a UUIDv7", jid, d.Path)
			}
			if other, dup := ids[jid]; dup {
				t.Fatalf("paths %s and %s share job id %s", other, d.Path, jid)
			}
			ids[jid] = d.Path
			switch d.Kind {
			case wfdef.KindJob:
				if len(d.Children) > 0 {
					t.Fatalf("job node %s has children", d.Path)
				}
				var probe map[string]json.RawMessage
				if json.Unmarshal(d.Request, &probe) != nil || probe["id"] != nil {
					t.Fatalf("leaf %s request %q", d.Path, d.Request)
				}
				e, err := job.ParseEnqueue(d.Request, now)
				if err != nil || e.Pending || e.Job.Type != d.JobType {
					t.Fatalf("leaf %s: request %q parses to %v, %v", d.Path, d.Request, e, err)
				}
			case wfdef.KindChain, wfdef.KindGroup, wfdef.KindBatch, wfdef.KindGraph:
				if len(d.Name) > wfdef.MaxNameLength {
					t.Fatalf("%s has a name of %d bytes", d.Path, len(d.Name))
				}
				if depth > wfdef.MaxDepth {
					t.Fatalf("%s nested %d deep", d.Path, depth)
				}
				if len(d.Children) == 0 || len(d.Children) > wfdef.MaxChildren {
					t.Fatalf("%s has %d children", d.Path, len(d.Children))
				}
				if (d.Kind == wfdef.KindBatch) != (len(d.Callbacks) > 0) {
					t.Fatalf("%s %s has %d callbacks", d.Kind, d.Path, len(d.Callbacks))
				}
				if d.Kind == wfdef.KindGraph && (len(d.Children) > wfdef.MaxGraphSteps || depth != 1) {
					t.Fatalf("graph %s with %d steps at depth %d", d.Path, len(d.Children), depth)
				}
				for i, c := range d.Children {
					if c.Index != i {
						t.Fatalf("child %d of %s has index %d", i, d.Path, c.Index)
					}
					for _, dep := range c.Deps {
						if d.Kind != wfdef.KindGraph || dep < 0 || dep >= len(d.Children) || dep == i {
							t.Fatalf("%s: step %d depends on %d", d.Path, i, dep)
						}
					}
					check(c, depth+1)
				}
				for name, c := range d.Callbacks {
					if c.Kind != wfdef.KindJob || !strings.HasSuffix(c.Path, "/"+name) {
						t.Fatalf("callback %s of %s: %+v", name, d.Path, c)
					}
					leaves-- // not counted in the job count
					check(c, depth+1)
				}
				return
			default:
				t.Fatalf("node %s of kind %q", d.Path, d.Kind)
			}
			leaves++
		}
		check(def, 1)
		if leaves != n {
			t.Fatalf("job count %d, but %d leaves", n, leaves)
		}
	})
}
