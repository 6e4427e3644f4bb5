package bench

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	ds = append(ds, -time.Millisecond) // clock skew counts as zero
	l := Summarize(ds)
	if l.Count != 101 || l.P50 != 50 || l.P99 != 99 || l.Max != 100 {
		t.Fatalf("%+v", l)
	}
	if (Summarize(nil) != Latency{}) {
		t.Fatal("empty")
	}
}

func TestPerMillion(t *testing.T) {
	// A job with 3 single writes of 1 KB, one strongly consistent read,
	// 3 SQS requests, 2 invocations of 0.1 s at 512 MB, 1 API request and
	// 3 events.
	u := Usage{DynamoDBWriteUnits: 3, DynamoDBReadUnits: 1, SQSRequests: 3, LambdaRequests: 2, LambdaGBSeconds: 2 * 0.1 * 0.5, APIRequests: 1, EventBridgeEvents: 3}
	c := USEast1.PerMillion(u)
	want := Cost{DynamoDB: 3*0.625 + 0.125, SQS: 1.2, LambdaRequests: 0.4, LambdaCompute: 1.333, APIGateway: 1, EventBridge: 3}
	want.NoCompute = want.DynamoDB + want.SQS + want.LambdaRequests + want.APIGateway + want.EventBridge
	want.Total = want.NoCompute + want.LambdaCompute
	for name, pair := range map[string][2]float64{"dynamodb": {c.DynamoDB, want.DynamoDB}, "sqs": {c.SQS, want.SQS},
		"lambda": {c.LambdaRequests, want.LambdaRequests}, "compute": {c.LambdaCompute, want.LambdaCompute},
		"api": {c.APIGateway, want.APIGateway}, "events": {c.EventBridge, want.EventBridge}, "total": {c.Total, want.Total}} {
		if math.Abs(pair[0]-pair[1]) > 0.002 {
			t.Errorf("%s: got %v want %v", name, pair[0], pair[1])
		}
	}
	sf := USEast1.StepFunctionsCost(3, 0.1)
	if sf.StandardPerMillionSteps != 25 || math.Abs(sf.ExpressPerMillionSteps-(1.0/3+0.1*0.0625*16.67)) > 0.01 {
		t.Fatalf("%+v", sf)
	}
	for _, p := range USEast1.Table() {
		if p.Source == "" || !strings.HasPrefix(p.Source, "https://aws.amazon.com/") {
			t.Errorf("%s has no AWS source", p.Item)
		}
	}
}

func TestAllIn(t *testing.T) {
	// 10 write units, 2 read units, 1 KB of logs, one API request, 2 KB
	// stored.
	u := Usage{DynamoDBWriteUnits: 10, DynamoDBReadUnits: 2, LogBytes: 1000, APIRequests: 1, Traces: 0.1, StoredBytes: 2000}
	c := USEast1.PerMillion(u)
	onDemand := 10*0.625 + 2*0.125
	provisioned := (10*0.00065 + 2*0.00013) / 0.7 / 3600 * 1e6
	for name, pair := range map[string][2]float64{"logs": {c.Logs, 0.5}, "total": {c.Total, onDemand + 1 + 0.5},
		"xray": {c.XRay, 0.5}, "storage": {c.StorageMonth, 0.5}, "provisioned": {c.Provisioned, provisioned + 1 + 0.5}} {
		if math.Abs(pair[0]-pair[1]) > 0.002 {
			t.Errorf("%s: got %v want %v", name, pair[0], pair[1])
		}
	}
	// Every variable of the deployed access log line has a typical value
	// or is known to be empty, so the priced line is the deployed one.
	for k, v := range topology.AccessLogFormat {
		for _, name := range contextVar.FindAllString(v, -1) {
			if _, ok := accessLogValues[name]; !ok && !accessLogEmpty[name] {
				t.Errorf("access log field %s: %s has no typical value in accessLogValues", k, name)
			}
		}
	}
	if n := AccessLogLineBytes(); n < 500 || n > 1200 {
		t.Errorf("access log line of %d bytes", n)
	}
	env, _ := topology.ForEnv("prod")
	idle := IdleCost(Sweeper{USDPerMonthOnAWS: 1.5}, env)
	polls := float64(len(env.Queues)) * 5 * 3 * 60 * 24 * 30 * 0.4 / 1e6
	if math.Abs(idle.PollsUSD-polls) > 0.001 || math.Abs(idle.USD-1.5-polls) > 0.001 {
		t.Errorf("idle %+v, want polls $%v", idle, polls)
	}
}

func TestCheck(t *testing.T) {
	if c := Check("x", 4, 5, true, "r"); !c.Pass || c.Margin != "20% under" || c.Verdict() != "PASS" {
		t.Fatalf("%+v", c)
	}
	if c := Check("x", 7.5, 5, true, "r"); c.Pass || c.Margin != "50% over" || c.Verdict() != "MISS" {
		t.Fatalf("%+v", c)
	}
	if c := Check("x", 130, 520, false, "jobs/s"); c.Pass || c.Margin != "0.25x of the target" {
		t.Fatalf("%+v", c)
	}
}

func TestAccount(t *testing.T) {
	env, _ := topology.ForEnv("local")
	set := func(ops ...callstats.Op) callstats.Set { s := callstats.Set{}; s.Add(ops); return s }
	d := Delta{
		Functions: map[string]callstats.Set{
			"api":     set(callstats.Op{Service: callstats.DynamoDB, Operation: "PutItem", Calls: 10, Attempts: 10, WriteUnits: 30}),
			"worker":  set(callstats.Op{Service: callstats.DynamoDB, Operation: "UpdateItem", Calls: 20, Attempts: 20, WriteUnits: 60}),
			"stream":  set(callstats.Op{Service: callstats.SQS, Operation: "SendMessageBatch", Calls: 1, Attempts: 1, Chunks: 1}, callstats.Op{Service: callstats.EventBridge, Operation: "PutEvents", Calls: 3, Attempts: 3, Items: 30}),
			"sweeper": set(callstats.Op{Service: callstats.DynamoDB, Operation: "Query", Calls: 99, Attempts: 99}),
		},
		ESM: set(callstats.Op{Service: callstats.SQS, Operation: "ReceiveMessage", Calls: 7, Attempts: 7, Chunks: 7, Empty: 5},
			callstats.Op{Service: callstats.DynamoDBStreams, Operation: "GetRecords", Calls: 4, Attempts: 4}),
		Invocations: map[string]int{"api": 10, "worker": 2, "stream": 1, "sweeper": 1},
		Busy:        map[string]time.Duration{"api": time.Second, "worker": 2 * time.Second},
	}
	p, u := Account(d, 10, env, 4, 3)
	if p.DynamoDB != 3 || p.DynamoDBByFunction["worker"] != 2 || p.DynamoDBByOperation["api PutItem"] != 1 || p.WriteUnits != 9 {
		t.Fatalf("dynamodb %+v", p)
	}
	if p.SQS != 0.3 || p.SQSIdleReceives != 0.5 || p.StreamReads != 0.4 || p.EventBridgeEvents != 3 || p.PutEvents != 0.3 {
		t.Fatalf("sqs/events %+v", p)
	}
	if p.Lambda != 1.3 || p.API != 1 || p.EmptyFetchDynamoDB != 1.2 {
		t.Fatalf("lambda %+v", p)
	}
	if math.Abs(u.LambdaGBSeconds-3*0.5/10) > 1e-9 {
		t.Fatalf("gb-s %v", u.LambdaGBSeconds)
	}
}

func TestRenderBarAndReplace(t *testing.T) {
	line := RenderBar("push jobs", 5, 10, 2*time.Second, 10)
	if !strings.Contains(line, "[#####.....]") || !strings.Contains(line, " 50%") || !strings.Contains(line, "2/s") {
		t.Fatalf("%q", line)
	}
	doc := "a\n<!-- b -->\nold\n<!-- e -->\nz\n"
	got, ok := ReplaceBetween(doc, "<!-- b -->", "<!-- e -->", "new table")
	if !ok || got != "a\n<!-- b -->\nnew table\n<!-- e -->\nz\n" {
		t.Fatalf("%q", got)
	}
	if _, ok := ReplaceBetween("x", "<!-- b -->", "<!-- e -->", ""); ok {
		t.Fatal("missing markers accepted")
	}
}

func TestReportAndChart(t *testing.T) {
	r := &Result{Phases: []Phase{{Name: "push jobs", Mode: "push", Kind: "jobs", Unit: "job", Units: 10, UnitsPerSecond: 100,
		PerUnit: PerUnit{DynamoDB: 4, SQS: 0.3, Lambda: 1.2}, EnqueueToStart: Latency{P50: 20, P99: 80}}},
		Binaries: []Binary{{Function: "api", Target: "linux/arm64", Bytes: 11_000_000}},
		Init:     map[string]Latency{"api": {P50: 30, Max: 40, Count: 7}}}
	r.Targets = Targets(r)
	md := r.SummaryMarkdown()
	for _, want := range []string{"| push jobs | 10 jobs | 100 job/s", "DynamoDB requests per job, push mode", "PASS", "not run"} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(r.DetailMarkdown(), "| api | linux/arm64 | 11.00 MB |") {
		t.Error(r.DetailMarkdown())
	}
	var buf bytes.Buffer
	if err := DrawPNG(&buf, "test", r.Panels()); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil || img.Bounds().Dx() != 1000 {
		t.Fatalf("%v %v", err, img)
	}
}

// The creation target is the slower of the group and the batch, and a
// refused creation misses it whatever the clock said.
func TestCreateTarget(t *testing.T) {
	find := func(r *Result) Target {
		for _, tg := range Targets(r) {
			if strings.HasPrefix(tg.Name, "create a 10000-job workflow") {
				return tg
			}
		}
		t.Fatalf("no creation target in %v", Targets(r))
		return Target{}
	}
	if tg := find(&Result{Create: CreateRun{Width: 10000, GroupAnswerSeconds: 0.2, BatchAnswerSeconds: 25, GroupSeconds: 12, BatchSeconds: 25}}); tg.Measured != 25 || tg.Pass {
		t.Errorf("slow batch: %+v", tg)
	}
	if tg := find(&Result{Create: CreateRun{Width: 10000, GroupAnswerSeconds: 0.3, BatchAnswerSeconds: 0.2, GroupSeconds: 12, BatchSeconds: 30, Status: 202}}); tg.Measured != 0.3 || !tg.Pass || !strings.Contains(tg.Note, "after 30 s") {
		t.Errorf("in time: %+v", tg)
	}
	if tg := find(&Result{Create: CreateRun{Width: 10000, Note: "the group was refused (500)"}}); tg.Pass {
		t.Errorf("refused: %+v", tg)
	}
	for _, tg := range Targets(&Result{}) {
		if strings.HasPrefix(tg.Name, "create a") {
			t.Errorf("a creation target without a run: %+v", tg)
		}
	}
}

// The money breakdown of every phase of a real run adds up to the phase's
// total, and the cost tables show it beside the previous run and Step
// Functions.
func TestBreakdownAddsUpToTheTotal(t *testing.T) {
	js, err := os.ReadFile("../../../bench/results/latest.json")
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(js, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Phases) == 0 {
		t.Fatal("no phases in the committed run")
	}
	for _, p := range r.Phases {
		sum := 0.0
		for _, v := range USEast1.Breakdown(p) {
			sum += v
		}
		if math.Abs(sum-p.Cost.Total) > 0.05 {
			t.Errorf("%s: items add up to $%.3f, the total is $%.3f", p.Name, sum, p.Cost.Total)
		}
	}
	r.Previous = PreviousOf(js)
	if r.Previous == nil || r.Previous.Cost[r.Phases[0].Name].Total != r.Phases[0].Cost.Total {
		t.Fatalf("previous run not read: %+v", r.Previous)
	}
	md := r.CostMarkdown()
	for _, want := range []string{"Step Functions Standard", "(same)", "Where a workflow step's money goes", "worker DynamoDB UpdateItem", "**total**"} {
		if !strings.Contains(md, want) {
			t.Errorf("cost tables lack %q:\n%s", want, md)
		}
	}
	if PreviousOf([]byte("not json")) != nil {
		t.Error("a bad previous file must read as none")
	}
}

// A graph's step-to-step latency is each step's start after its last
// dependency's completion (d waits for the later of b and c), and its
// jobs are the four diamond steps in order.
func TestGraphStepToStep(t *testing.T) {
	ids, groups := jobIDsOf("graphs", []string{"019414d4-8b2e-7c3a-b5d1-f0e2a3b4c5d6"}, 0)
	if len(ids) != 4 || len(groups) != 1 || len(groups[0]) != 4 {
		t.Fatalf("ids %v groups %v; want the four steps of one graph", ids, groups)
	}
	at := func(ms int) *time.Time {
		v := time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond)
		return &v
	}
	g := groups[0]
	jobs := map[string]*job.Job{
		g[0]: {StartedAt: at(0), CompletedAt: at(10)},
		g[1]: {StartedAt: at(15), CompletedAt: at(20)},   // 5 ms after a
		g[2]: {StartedAt: at(17), CompletedAt: at(100)},  // 7 ms after a
		g[3]: {StartedAt: at(109), CompletedAt: at(110)}, // 9 ms after c, the later
	}
	l := stepToStep("graphs", groups, jobs)
	if l.Count != 3 || l.Max != 9 {
		t.Fatalf("step to step %+v; want 3 samples, the longest 9 ms", l)
	}
}

// The side-by-side table puts each figure beside the peer's recorded one,
// its ratio oriented so that above 1 is better here: throughput ours over
// theirs, latency and requests theirs over ours.
func TestPeerMarkdown(t *testing.T) {
	r := &Result{
		Split: &SplitRun{Jobs: 100, FetchCount: 10, EnqueuePerSecond: 434, FetchAck1PerSecond: 43.5, FetchAckNPerSecond: 266},
		Phases: []Phase{
			{Name: "pull jobs", PerUnit: PerUnit{DynamoDB: 4, EmptyFetchDynamoDB: 1, SQS: 0}},
			{Name: "pull chains", WorkflowsPerSecond: 36, PerUnit: PerUnit{DynamoDB: 7}},
			{Name: "pull chains paced", StepToStep: &Latency{P50: 40, P99: 14}},
		},
	}
	md := r.PeerMarkdown()
	for _, want := range []string{
		"| enqueue (POST /jobs, nothing fetching) | 434 jobs/s | 217 jobs/s | 2.00x |",
		"| fetch+ack from a backlog, FETCH of 1 | 43.5 jobs/s | 87 jobs/s | 0.50x |",
		"| fetch+ack from a backlog, FETCH of 10 | 266 jobs/s | 133 jobs/s | 2.00x |",
		"| 3-step chains, pull mode | 36 chains/s | 18 chains/s | 2.00x |",
		"| step→step p50, pull chains at a steady rate | 40 ms | 20 ms | 0.50x |",
		"| step→step p99, pull chains at a steady rate | 14 ms | 28 ms | 2.00x |",
		"| AWS requests per job, pull mode (DynamoDB and SQS) | 3 requests | 15 requests | 5.00x |",
		"| AWS requests per 3-step chain, pull mode | 21 requests | 63 requests | 3.00x |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	if !strings.Contains(r.SummaryMarkdown(), md) {
		t.Error("the summary (README, docs/benchmark.md) leaves the side-by-side out")
	}
	if (&Result{}).PeerMarkdown() != "" {
		t.Error("a run without the figures renders a table")
	}
}
