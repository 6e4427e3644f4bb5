package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

type client struct {
	base, token string
}

func (c client) do(method, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Content-Type", "application/openjobspec+json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out, nil
}

// push enqueues a job and returns it as the API answered.
func (c client) push(body map[string]any) (map[string]any, error) {
	st, out, err := c.do(http.MethodPost, "/ojs/v1/jobs", body)
	if err != nil || st != http.StatusCreated {
		return nil, fmt.Errorf("push: status %d %v %v", st, out, err)
	}
	return out["job"].(map[string]any), nil
}

// waitDone waits until the job is completed or discarded and returns it.
func (c client) waitDone(id any) (map[string]any, error) {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, out, err := c.do(http.MethodGet, fmt.Sprint("/ojs/v1/jobs/", id), nil)
		if j, _ := out["job"].(map[string]any); err != nil || j["state"] == "completed" || j["state"] == "discarded" {
			return j, err
		}
	}
	return nil, fmt.Errorf("job %s did not reach [completed discarded] within 60s", id)
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// runJobsDemo pushes a job to the push-mode queue "lambda" (run by the worker
// function), one that fails once and is retried, and a pull-mode job that
// the demo fetches and acknowledges itself like an external worker.
func runJobsDemo(base, token string) error {
	c := client{base: base, token: token}
	fmt.Println("== Demo 1: push mode (SQS -> worker function)")
	j, err := c.push(map[string]any{"type": "demo.greet", "args": []any{"OJS on AWS"}, "options": map[string]any{"queue": "lambda"}})
	if err != nil {
		return err
	}
	fmt.Printf("   POST /ojs/v1/jobs -> 201, job %s is %s\n", j["id"], j["state"])
	start := time.Now()
	if j, err = c.waitDone(j["id"]); err != nil {
		return err
	}
	fmt.Printf("   the stream function relayed it to SQS, the worker ran demo.greet: %s after %v, result %s\n\n", j["state"], time.Since(start).Round(time.Millisecond), show(j["result"]))

	fmt.Println("== Demo 2: a handler that fails once, retried after its backoff")
	if j, err = c.push(map[string]any{"type": "test.fail_once", "args": []any{}, "options": map[string]any{"queue": "lambda", "retry": map[string]any{"max_attempts": 3, "initial_interval": "PT1S"}}}); err == nil {
		j, err = c.waitDone(j["id"])
	}
	if err != nil {
		return err
	}
	errs, _ := j["errors"].([]any)
	fmt.Printf("   job %s: %s on attempt %v after %d recorded failure(s); result %s\n\n", j["id"], j["state"], j["attempt"], len(errs), show(j["result"]))

	fmt.Println("== Demo 3: pull mode (an external worker fetches and acknowledges)")
	if j, err = c.push(map[string]any{"type": "report.generate", "args": []any{42}}); err != nil {
		return err
	}
	_, out, err := c.do(http.MethodPost, "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"default"}, "worker_id": "demo-worker"})
	if err != nil {
		return err
	}
	jobs, _ := out["jobs"].([]any)
	fmt.Printf("   fetched %d job(s) from queue default\n", len(jobs))
	st, _, err := c.do(http.MethodPost, "/ojs/v1/workers/ack", map[string]any{"job_id": j["id"], "result": map[string]any{"rows": 42}})
	if err != nil {
		return err
	}
	_, out, _ = c.do(http.MethodGet, fmt.Sprint("/ojs/v1/jobs/", j["id"]), nil)
	fmt.Printf("   ack -> %d; job %s is %s\n\n", st, j["id"], out["job"].(map[string]any)["state"])
	return nil
}

func printHelp(base, token string) {
	auth := ""
	if token != "" {
		auth = ` -H "Authorization: Bearer ` + token + `"`
	}
	fmt.Printf(`Try it (Ctrl-C stops everything):
  # push mode: the worker function runs demo.greet
  curl -s -X POST %[1]s/ojs/v1/jobs -H 'Content-Type: application/json'%[2]s \
       -d '{"type":"demo.greet","args":["you"],"options":{"queue":"lambda"}}'
  curl -s %[1]s/ojs/v1/jobs/<id>%[2]s
  # pull mode: be the worker yourself
  curl -s -X POST %[1]s/ojs/v1/jobs -H 'Content-Type: application/json'%[2]s -d '{"type":"email.send","args":["a@b.c"]}'
  curl -s -X POST %[1]s/ojs/v1/workers/fetch -H 'Content-Type: application/json'%[2]s -d '{"queues":["default"],"worker_id":"me"}'
  curl -s -X POST %[1]s/ojs/v1/workers/ack -H 'Content-Type: application/json'%[2]s -d '{"job_id":"<id>","result":{"ok":true}}'
  # failures end in the dead letter list
  curl -s -X POST %[1]s/ojs/v1/jobs -H 'Content-Type: application/json'%[2]s \
       -d '{"type":"test.fail_always","args":[],"options":{"queue":"lambda","retry":{"max_attempts":2,"initial_interval":"PT1S"}}}'
  curl -s %[1]s/ojs/v1/dead-letter%[2]s
`, base, auth)
}
