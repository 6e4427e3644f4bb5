package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// etlWorkflow is the seed's ETL example (ojs-workflows.md 12.4): extract,
// three transforms in parallel, load; run by the worker function with the
// example handlers (test.sleep stands in for real work).
const etlWorkflow = `{"type":"chain","name":"etl-pipeline","steps":[
  {"type":"test.echo","args":["extract from api.example.com/v2/records"],"options":{"queue":"lambda"}},
  {"type":"group","name":"parallel-transforms","jobs":[
    {"type":"test.sleep","args":[300],"options":{"queue":"lambda"}},
    {"type":"test.sleep","args":[600],"options":{"queue":"lambda"}},
    {"type":"test.sleep","args":[900],"options":{"queue":"lambda"}}]},
  {"type":"test.echo","args":["load into the warehouse"],"options":{"queue":"lambda"}}]}`

// runETLDemo creates the ETL workflow and prints every change of its
// steps until it finishes.
func runETLDemo(base, token string) error {
	c := client{base: base, token: token}
	fmt.Println("== ETL workflow: chain(extract, group(transform x3), load), run by the worker function")
	w, err := watchWorkflow(c, etlWorkflow, "workflow", "", describe)
	if err != nil {
		return err
	}
	steps := w["steps"].([]any)
	fmt.Printf("   the load step received parent_results from extract and all three transforms:\n   curl -s %s/ojs/v1/jobs/%v\n\n", base, steps[2].(map[string]any)["job_id"])
	return runDiamondDemo(c, base)
}

// watchWorkflow creates the workflow body (what names it in an error,
// note follows its id) and prints every change of line(workflow) until it
// finishes, then returns it as it finished.
func watchWorkflow(c client, body, what, note string, line func(w map[string]any) string) (map[string]any, error) {
	st, out, err := c.do(http.MethodPost, "/ojs/v1/workflows", json.RawMessage(body))
	if err != nil || st != http.StatusCreated {
		return nil, fmt.Errorf("create %s: status %d %v %v", what, st, out, err)
	}
	id := out["workflow"].(map[string]any)["id"].(string)
	fmt.Printf("   POST /ojs/v1/workflows -> 201, workflow %s%s\n", id, note)
	start, last := time.Now(), ""
	for time.Since(start) < 60*time.Second {
		_, out, err = c.do(http.MethodGet, "/ojs/v1/workflows/"+id, nil)
		if err != nil {
			return nil, err
		}
		w := out["workflow"].(map[string]any)
		if l := line(w); l != last {
			fmt.Printf("   %6.2fs  %s\n", time.Since(start).Seconds(), l)
			last = l
		}
		if s := w["state"]; s == "completed" || s == "failed" || s == "cancelled" {
			return w, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("workflow %s did not finish within 60s", id)
}

func describe(w map[string]any) string {
	var parts []string
	for _, s := range w["steps"].([]any) {
		st := s.(map[string]any)
		if jobs, ok := st["jobs"].([]any); ok {
			var inner []string
			for _, j := range jobs {
				inner = append(inner, fmt.Sprint(j.(map[string]any)["state"]))
			}
			parts = append(parts, fmt.Sprintf("transform[%s]", strings.Join(inner, ",")))
			continue
		}
		parts = append(parts, fmt.Sprint(st["state"]))
	}
	return fmt.Sprintf("workflow %-9v extract=%s  %s  load=%s", w["state"], parts[0], parts[1], parts[2])
}

// diamondWorkflow is a dependency graph (ojs-http-binding.md 14.1): fetch,
// then two branches at once, then a step that waits for both.
const diamondWorkflow = `{"name":"onboarding-diamond","options":{"queue":"lambda"},"steps":[
  {"id":"fetch","type":"test.echo","args":["fetch the user"],"depends_on":[]},
  {"id":"welcome","type":"test.sleep","args":[400],"depends_on":["fetch"]},
  {"id":"profile","type":"test.sleep","args":[800],"depends_on":["fetch"]},
  {"id":"notify","type":"test.echo","args":["notify: both done"],"depends_on":["welcome","profile"]}]}`

// runDiamondDemo creates the diamond and prints every change of its steps
// until it finishes.
func runDiamondDemo(c client, base string) error {
	fmt.Println("== Dependency graph: fetch, then welcome and profile at once, then notify (waits for both)")
	w, err := watchWorkflow(c, diamondWorkflow, "the diamond", " (a graph)", func(w map[string]any) string {
		var parts []string
		for _, s := range w["steps"].([]any) {
			st := s.(map[string]any)
			parts = append(parts, fmt.Sprintf("%s=%v", st["id"], st["state"]))
		}
		return fmt.Sprintf("workflow %-9v %s", w["state"], strings.Join(parts, "  "))
	})
	if err != nil {
		return err
	}
	var notify any
	for _, s := range w["steps"].([]any) {
		if st := s.(map[string]any); st["id"] == "notify" {
			notify = st["job_id"]
		}
	}
	fmt.Printf("   notify received both branches' results, keyed by step id:\n   curl -s %s/ojs/v1/jobs/%v\n\n", base, notify)
	return nil
}
