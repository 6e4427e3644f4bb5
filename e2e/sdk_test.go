package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The official SDKs' workflow bodies (e2e/testdata/sdk, data not code) run
// to their end as the SDK meant them: batches fire their callbacks per the
// firing matrix (one job fails in each: on_complete and on_failure fire
// once, on_success never), chains run in order with each step receiving
// the earlier results, groups run every job. GET answers in the shape the
// SDKs parse (a name, steps with string ids).
func TestSDKWorkflowBodies(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/sdk/*.json")
	if err != nil || len(files) < 8 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, f := range files {
		f := f
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			q := uniqueQueue(t) + "-" + name
			body := strings.ReplaceAll(string(raw), "{{queue}}", q)
			wf := createWorkflow(t, body)
			id := wf["id"].(string)
			var order []string
			parents := map[string]string{}
			done := work(t, q, id, func(j map[string]any) (any, string) {
				typ := j["type"].(string)
				order = append(order, typ)
				parents[typ] = pr(j)
				if strings.Contains(fmt.Sprint(j["args"]), "fail:true") {
					return nil, "this job fails"
				}
				return map[string]any{"by": typ}, ""
			})
			if _, ok := done["name"].(string); !ok {
				t.Fatalf("GET has no name: %v", done)
			}
			if steps, ok := done["steps"].([]any); ok {
				for _, s := range steps {
					if _, ok := s.(map[string]any)["id"].(string); !ok {
						t.Fatalf("a step without a string id: %v", s)
					}
				}
			}
			ran := map[string]int{}
			for _, typ := range order {
				ran[typ]++
			}
			switch {
			case strings.HasSuffix(name, "-batch"):
				var complete, success, failure string
				for typ := range ran {
					switch {
					case strings.Contains(typ, "report"), strings.HasSuffix(typ, ".done"):
						complete = typ
					case strings.Contains(typ, "success"), strings.Contains(typ, "celebrate"), strings.HasSuffix(typ, ".ok"):
						success = typ
					case strings.Contains(typ, "fail"), strings.Contains(typ, "alert"):
						failure = typ
					}
				}
				if complete == "" || failure == "" || success != "" || ran[complete] != 1 || ran[failure] != 1 {
					t.Fatalf("callbacks ran %v (on_complete %q on_failure %q on_success %q)", ran, complete, failure, success)
				}
				var rs []any
				if err := json.Unmarshal([]byte(parents[complete]), &rs); err != nil || !strings.Contains(parents[complete], `"state":"failed"`) {
					t.Fatalf("on_complete parent_results hold every job, the failed one too: %s", parents[complete])
				}
				if done["state"] != "completed" {
					t.Fatalf("a batch whose fired callbacks completed: %v", done["state"])
				}
			case strings.HasSuffix(name, "-chain"):
				last := order[len(order)-1]
				var rs []any
				if err := json.Unmarshal([]byte(parents[last]), &rs); err != nil || len(rs) != 2 || done["state"] != "completed" {
					t.Fatalf("chain ran %v; last step's parent_results %s; %v", order, parents[last], done["state"])
				}
				if name != "js-chain" {
					// The steps form lists the chain in order.
					var def struct {
						Steps []struct {
							Type string `json:"type"`
						} `json:"steps"`
					}
					_ = json.Unmarshal(raw, &def)
					var want []string
					for _, s := range def.Steps {
						want = append(want, s.Type)
					}
					if strings.Join(order, ",") != strings.Join(want, ",") {
						t.Fatalf("chain ran %v, want %v", order, want)
					}
				}
			case strings.HasSuffix(name, "-group"):
				if done["state"] != "completed" || len(order) < 2 || num(done["jobs_completed"]) != len(order) {
					t.Fatalf("group ran %v: %v", order, done)
				}
			}
			if r := do(t, http.MethodGet, "/ojs/v1/workflows/"+id, nil); r.Status != 200 {
				t.Fatalf("get: %d", r.Status)
			}
		})
	}
}
