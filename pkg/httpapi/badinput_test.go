package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/admin"
	"github.com/ojs-aws/ojs-serverless/pkg/checkpoint"
	"github.com/ojs-aws/ojs-serverless/pkg/console"
	"github.com/ojs-aws/ojs-serverless/pkg/cron"
	"github.com/ojs-aws/ojs-serverless/pkg/deadletter"
	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/queue"
	"github.com/ojs-aws/ojs-serverless/pkg/schema"
	"github.com/ojs-aws/ojs-serverless/pkg/webhook"
	"github.com/ojs-aws/ojs-serverless/pkg/workflow"
)

// liveServer is the API wired as pkg/app wires it (every optional route
// group on: admin, dead letter, crons, workflows, console) over a fresh
// table in DynamoDB Local.
func liveServer(t *testing.T) *httpapi.Server {
	t.Helper()
	return liveServerWith(t, httpapi.Config{})
}

// liveServerWith is liveServer with c's Region and FetchWait.
func liveServerWith(t *testing.T, c httpapi.Config) *httpapi.Server {
	t.Helper()
	st, _ := testenv.Table(t)
	logger := slog.New(slog.DiscardHandler)
	qsvc := queue.NewService(st, queue.Config{Logger: logger})
	wfs := workflow.New(st, workflow.Config{Admit: qsvc, Logger: logger})
	svc := lifecycle.New(st, lifecycle.Config{Logger: logger, Workflows: wfs, Queues: qsvc})
	dead := deadletter.New(st, svc, qsvc, deadletter.Config{Logger: logger})
	ad := admin.New(st, qsvc.Store(), svc, qsvc, dead, admin.Config{Logger: logger})
	crons := &cron.Service{Store: cron.NewStore(st), Jobs: svc, Queues: qsvc, Logger: logger}
	con, err := console.New(console.Config{Admin: ad, Workflows: wfs, Crons: crons, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return httpapi.New(httpapi.Services{Producer: svc, Worker: svc, Queues: qsvc, Progress: svc}, st, wfs,
		httpapi.Config{Logger: logger, Admin: ad, Console: con, DeadLetter: dead, Crons: crons, Schemas: schema.New(st.DB(), st.Table(), nil),
			Webhooks: webhook.NewStore(st.DB(), st.Table()), Tenants: qsvc.Tenants(), Checkpoints: checkpoint.New(st, nil),
			Region: c.Region, FetchWait: c.FetchWait})
}

// A well-formed value for any path parameter: a UUIDv7 no job, worker or
// workflow has, which is also a valid queue and cron name.
const goodParam = "019b0000-0000-7000-8000-000000000000"

// Bad path parameter values, as they appear in the URL (escaped).
var badParams = []string{
	"%20",
	strings.Repeat("a", 10<<10),
	"not-a-uuid",
	"0190a0b0-0000-4000-8000-000000000000", // a UUIDv4
	"%00",
	"..%2F..%2Fetc",
	"%C3%A9%E2%98%83%F0%9F%92%A5",
	"%22%27%3C%3E%60%5C",
	"%FF%FE",
	"-1",
	"%2A",
	strings.Repeat("%E2%98%83", 400),
}

func deepJSON(n int) string {
	return `{"args":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
}

// Bad bodies, sent to every route with a body method.
var badBodies = []string{
	"not json",
	`{"type":`,
	`[]`,
	`[{"type":"x"}]`,
	`42`,
	`"a string"`,
	`null`,
	`true`,
	`{}`,
	deepJSON(5000),
	deepJSON(20000),
	`{"type":"` + strings.Repeat("t", 300<<10) + `","queue":"` + strings.Repeat("q", 300<<10) + `","name":"` + strings.Repeat("n", 3000) +
		`","id":"` + strings.Repeat("i", 3000) + `","job_id":"` + strings.Repeat("j", 3000) + `","worker_id":"` + strings.Repeat("w", 3000) + `"}`,
	`{"type":1,"args":"x","queue":[],"options":"x","meta":3,"id":{},"job_id":1,"worker_id":[],"queues":"x","max_jobs":"x","wait_ms":"x",` +
		`"filter":"x","confirm":"yes","states":"x","older_than":5,"cron":1,"expression":[],"name":2,"steps":"x","jobs":{},"error":"x","result":1,` +
		`"job_template":"x","timezone":3,"enabled":"x","ids":"x","concurrency":"x","paused":"x","state":7}`,
	`{"type":"t","args":[],"queue":"","queues":[""],"max_jobs":-1,"wait_ms":-5,"job_id":"","worker_id":"","confirm":true,"filter":{"state":"bogus","queue":"\u0000"},` +
		`"states":["bogus"],"older_than":"not a time","cron":"not a cron","name":"","steps":[],"jobs":[],"timezone":"Mars/Olympus","ids":[""],"concurrency":-3}`,
	`{"max_jobs":1e308,"wait_ms":99999999999999999999,"concurrency":1.5,"limit":-9223372036854775809,"visibility_timeout_ms":-1,"older_than":"9999-99-99T99:99:99Z"}`,
	`{"type":"\ud800","queue":"\u0000","args":["\udfff"],"name":"../../x","job_id":"%00","worker_id":"\u202e"}`,
}

// Bad query strings, sent to every route.
var badQueries = []string{
	"limit=abc",
	"limit=-1&offset=-5&page=-1&per_page=-1&count=-1",
	"limit=99999999999999999999&offset=99999999999999999999&wait_ms=99999999999999999999",
	"limit=1&limit=2&state=active&state=bogus&queue=a&queue=b",
	"cursor=garbage&after=garbage&next=garbage&page_token=garbage",
	"cursor=%00%FF%FE&after=%00",
	"cursor=" + strings.Repeat("Z", 10<<10),
	"state=bogus&queue=%00&type=%FF&status=x&since=notatime&until=notatime&from=x&to=x&period=x&window=-1h",
	"a=%ZZ&b=%",
	"limit=0&offset=1.5&since=-1&until=9999999999999999999",
	"queue=" + strings.Repeat("q", 10<<10) + "&type=" + strings.Repeat("t", 10<<10),
	"wait=abc&confirm=maybe&force=x&event_type=%22&job_id=not-a-uuid&worker_id=%00&workflow_id=x",
}

type probe struct {
	method, target, body string
}

// Every route of the route table answers malformed path parameters,
// bodies and query strings with a 4xx (or a success), never a 5xx, and an
// error it answers is in the OJS error shape. The routes come from the
// server itself, so a new route is covered without changing this test.
func TestEveryRouteAnswersBadInputBelow500(t *testing.T) {
	t.Parallel()
	srv := liveServer(t)
	routes := srv.Routes()
	if len(routes) < 40 {
		t.Fatalf("only %d routes registered: %v", len(routes), routes)
	}
	var probes []probe
	for _, rt := range routes {
		method, pattern, _ := strings.Cut(rt, " ")
		hasBody := method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch || method == http.MethodDelete
		fill := func(v string) string {
			var segs []string
			for _, seg := range strings.Split(pattern, "/") {
				if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
					if seg == "{$}" {
						seg = ""
					} else {
						seg = v
					}
				}
				segs = append(segs, seg)
			}
			return strings.Join(segs, "/")
		}
		defBody := ""
		if hasBody {
			defBody = "{}"
		}
		good := fill(goodParam)
		if strings.Contains(pattern, "{") {
			for _, v := range badParams {
				probes = append(probes, probe{method, fill(v), defBody})
			}
		}
		for _, q := range badQueries {
			probes = append(probes, probe{method, good + "?" + q, defBody})
		}
		if hasBody {
			for _, b := range badBodies {
				probes = append(probes, probe{method, good, b})
			}
		}
	}
	var (
		mu     sync.Mutex
		failed int
		wg     sync.WaitGroup
	)
	work := make(chan probe)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if msg := send(srv, p); msg != "" {
					mu.Lock()
					failed++
					if failed <= 50 {
						t.Error(msg)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range probes {
		work <- p
	}
	close(work)
	wg.Wait()
	t.Logf("%d routes, %d requests, %d failures", len(routes), len(probes), failed)
}

// send serves one probe and describes what is wrong with the answer ("" when
// nothing is).
func send(srv *httpapi.Server, p probe) string {
	var body *bytes.Reader
	if p.body != "" {
		body = bytes.NewReader([]byte(p.body))
	} else {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(p.method, "http://ojs.test"+p.target, body)
	if err != nil {
		return "" // not a request URI any HTTP server would route
	}
	if p.body != "" {
		req.Header.Set("Content-Type", httpapi.ContentType)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	what := fmt.Sprintf("%s %s body %s", p.method, short(p.target), short(p.body))
	if rec.Code >= 500 {
		return fmt.Sprintf("%s: %d %s", what, rec.Code, short(rec.Body.String()))
	}
	if rec.Code >= 400 && rec.Header().Get("Content-Type") == httpapi.ContentType {
		var env errorEnvelope
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Error == nil || env.Error.Code == "" || env.Error.Message == "" ||
			env.Error.Retryable == nil || env.Error.RequestID == "" {
			return fmt.Sprintf("%s: %d without the OJS error shape: %s", what, rec.Code, short(rec.Body.String()))
		}
	}
	return ""
}

func short(s string) string {
	if len(s) > 160 {
		return fmt.Sprintf("%s...(%d bytes)", s[:160], len(s))
	}
	return s
}
