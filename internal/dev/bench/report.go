package bench

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Result is one benchmark run: bench/results/latest.json.
type Result struct {
	StartedAt time.Time `json:"started_at"`
	Seconds   float64   `json:"seconds"`
	Machine   Machine   `json:"machine"`
	Settings  Settings  `json:"settings"`
	Phases    []Phase   `json:"phases"`
	// EmptyFetch is the calibration: requests one FETCH that finds
	// nothing costs.
	EmptyFetch EmptyFetch `json:"empty_fetch"`
	Sweeper    Sweeper    `json:"sweeper"`
	Idle       Idle       `json:"idle_month"`
	Binaries   []Binary   `json:"binaries"`
	// Init is each function's init time (host build), started one at a time
	// against a stub Runtime API; InitUnderLoad the same as the local runtime
	// saw it, starting every environment at once.
	Init          map[string]Latency `json:"init"`
	InitUnderLoad map[string]Latency `json:"init_under_load"`
	Big           BigRun             `json:"big"`
	Create        CreateRun          `json:"create"`
	// Split is enqueueing and fetching measured apart (nil if not run).
	Split         *SplitRun     `json:"split,omitempty"`
	Prices        []Price       `json:"prices"`
	StepFunctions StepFunctions `json:"step_functions"`
	Targets       []Target      `json:"targets"`
	// Previous is the cost of the run this one replaced in the results
	// directory, for comparison (nil when there was none).
	Previous *Previous `json:"previous,omitempty"`
}

// Previous is a former run's cost per million units, by phase name.
type Previous struct {
	StartedAt time.Time       `json:"started_at"`
	Cost      map[string]Cost `json:"usd_per_million_units"`
}

// PreviousOf reads the cost of each phase from a former run's
// latest.json; nil if it holds none.
func PreviousOf(js []byte) *Previous {
	var r struct {
		StartedAt time.Time `json:"started_at"`
		Phases    []struct {
			Name string `json:"name"`
			Cost Cost   `json:"usd_per_million_units"`
		} `json:"phases"`
	}
	if json.Unmarshal(js, &r) != nil || len(r.Phases) == 0 {
		return nil
	}
	p := &Previous{StartedAt: r.StartedAt, Cost: map[string]Cost{}}
	for _, ph := range r.Phases {
		p.Cost[ph.Name] = ph.Cost
	}
	return p
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	GoVersion string `json:"go_version"`
}

// Settings are the run's knobs.
type Settings struct {
	Jobs       int `json:"jobs"`
	Chains     int `json:"chains"`
	Graphs     int `json:"graphs,omitempty"`
	Batches    int `json:"batches"`
	BatchWidth int `json:"batch_width"`
	Clients    int `json:"clients"`
	Workers    int `json:"workers"`
	FetchCount int `json:"fetch_count"`
	// FetchWaitMS is the pull workers' wait_ms (a long poll); 0: they
	// back off after an empty FETCH instead (FetchBackoffMS).
	FetchWaitMS int `json:"fetch_wait_ms,omitempty"`
	// FetchBackoffMS is the longest back-off after an empty FETCH (it
	// doubles from 5 ms); 0 means 50.
	FetchBackoffMS int `json:"fetch_backoff_ms,omitempty"`
	Concurrency    int `json:"concurrency"`
	// ArgsBytes is the JSON the measured phases' jobs carry as an extra
	// argument (ledger rows, about that many bytes); 0: an index only.
	ArgsBytes int `json:"args_bytes,omitempty"`
}

// pollingNote says how the pull workers wait for jobs when it is not the
// default (backing off up to 50 ms after an empty FETCH).
func (s Settings) pollingNote() string {
	switch {
	case s.FetchWaitMS > 0:
		return fmt.Sprintf(" (waiting up to %d ms in each FETCH)", s.FetchWaitMS)
	case s.FetchBackoffMS > 0 && s.FetchBackoffMS != 50:
		return fmt.Sprintf(" (backing off up to %d ms after an empty FETCH)", s.FetchBackoffMS)
	}
	return ""
}

// argsNote says what the jobs carry when it is more than an index.
func (s Settings) argsNote() string {
	if s.ArgsBytes > 0 {
		return fmt.Sprintf("; every job carries %d bytes of JSON args", len(argsPayload(s.ArgsBytes)))
	}
	return ""
}

// Phase is one measured workload.
type Phase struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	Kind string `json:"kind"`
	// Unit is "job" or "step"; Units how many ran; Workflows how many
	// workflows held them.
	Unit      string  `json:"unit"`
	Units     int     `json:"units"`
	Workflows int     `json:"workflows,omitempty"`
	Seconds   float64 `json:"seconds"`
	// UnitsPerSecond is end to end: first enqueue to last completion.
	UnitsPerSecond     float64 `json:"units_per_second"`
	WorkflowsPerSecond float64 `json:"workflows_per_second,omitempty"`
	EnqueueToStart     Latency `json:"enqueue_to_start"`
	// StepToStep is a step's completion to the next step's start (chains;
	// graphs: the last dependency's completion to the step's start) or the
	// last job's completion to the callback's start (batches).
	StepToStep *Latency `json:"step_to_step,omitempty"`
	PerUnit    PerUnit  `json:"per_unit"`
	Usage      Usage    `json:"usage_per_unit"`
	Cost       Cost     `json:"usd_per_million_units"`
	// Calls are the raw counts by function and "mapping".
	Calls          map[string][]callstats.Op `json:"calls"`
	Invocations    map[string]int            `json:"invocations"`
	ClientRequests map[string]int            `json:"client_requests"`
	EmptyFetches   int                       `json:"empty_fetches,omitempty"`
	Errors         []string                  `json:"errors,omitempty"`
}

// DynamoDBPerUnitExclIdle is DynamoDB requests per unit without empty
// FETCH polls.
func (p Phase) DynamoDBPerUnitExclIdle() float64 {
	return round(p.PerUnit.DynamoDB-p.PerUnit.EmptyFetchDynamoDB, 2)
}

// EmptyFetch is the calibration of an empty FETCH.
type EmptyFetch struct {
	Fetches          int                `json:"fetches"`
	DynamoDB         float64            `json:"dynamodb_requests_each"`
	ByOperation      map[string]float64 `json:"by_operation"`
	ReadUnitsEach    float64            `json:"read_units_each"`
	APIRequestsEach  float64            `json:"api_requests_each"`
	LambdaInvocation float64            `json:"lambda_invocations_each"`
}

// Sweeper is the sweeper's fixed cost, measured over the run.
type Sweeper struct {
	Invocations         int                `json:"invocations"`
	DynamoDBPerSweep    float64            `json:"dynamodb_requests_per_sweep"`
	ReadUnitsPerSweep   float64            `json:"read_units_per_sweep"`
	USDPerMonthOnAWS    float64            `json:"usd_per_month_at_one_sweep_a_minute"`
	Note                string             `json:"note"`
	DynamoDBByOperation map[string]float64 `json:"dynamodb_by_operation"`
}

// Binary is one function binary's size.
type Binary struct {
	Function string `json:"function"`
	Target   string `json:"target"` // linux/arm64 (deployed) or the host
	Bytes    int64  `json:"bytes"`
}

// MB is the size in MB (10^6 bytes).
func (b Binary) MB() float64 { return round(float64(b.Bytes)/1e6, 2) }

// CreateRun times the creation of the largest workflows: one POST of a
// group and one of a batch of Width jobs each (BENCH_CREATE_WIDTH). The
// answer (201, or 202 past OJS_ASYNC_CREATE_ITEMS) is what API Gateway's
// 29 s bounds; Seconds run until every first job exists.
type CreateRun struct {
	Width              int     `json:"width,omitempty"`
	GroupAnswerSeconds float64 `json:"group_answer_seconds,omitempty"`
	BatchAnswerSeconds float64 `json:"batch_answer_seconds,omitempty"`
	GroupSeconds       float64 `json:"group_seconds,omitempty"`
	BatchSeconds       float64 `json:"batch_seconds,omitempty"`
	// Status is the HTTP status of the answers (201 or 202).
	Status int    `json:"status,omitempty"`
	Note   string `json:"note"`
}

// BigRun is the optional large batch (BENCH_BIG=1).
type BigRun struct {
	Run                bool    `json:"run"`
	Jobs               int     `json:"jobs,omitempty"`
	Workflows          int     `json:"workflows,omitempty"`
	Seconds            float64 `json:"seconds,omitempty"`
	JobsPerSecond      float64 `json:"jobs_per_second,omitempty"`
	CallbacksFiredOnce bool    `json:"callbacks_fired_once"`
	// Retries are workflow creations answered 500 and sent again.
	Retries int    `json:"retries,omitempty"`
	Note    string `json:"note"`
}

// Target is one goal the run is checked against.
type Target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Limit    float64 `json:"limit"`
	// AtMost: the measured value must not exceed Limit; else it must
	// reach it.
	AtMost bool   `json:"at_most"`
	Unit   string `json:"unit"`
	Pass   bool   `json:"pass"`
	Margin string `json:"margin"`
	Note   string `json:"note,omitempty"`
}

// Check evaluates a target and describes the margin.
func Check(name string, measured, limit float64, atMost bool, unit string) Target {
	t := Target{Name: name, Measured: round(measured, 2), Limit: limit, AtMost: atMost, Unit: unit}
	if limit == 0 {
		t.Margin = "n/a"
		return t
	}
	if atMost {
		t.Pass = measured <= limit
		d := (limit - measured) / limit * 100
		if t.Pass {
			t.Margin = fmt.Sprintf("%.0f%% under", d)
		} else {
			t.Margin = fmt.Sprintf("%.0f%% over", -d)
		}
	} else {
		t.Pass = measured >= limit
		t.Margin = fmt.Sprintf("%.2fx of the target", measured/limit)
	}
	return t
}

// Verdict is PASS or MISS.
func (t Target) Verdict() string { return map[bool]string{true: "PASS", false: "MISS"}[t.Pass] }

func (t Target) limitText() string {
	return map[bool]string{true: "≤", false: "≥"}[t.AtMost] + " " + num(t.Limit) + " " + t.Unit
}

func num(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// Phase returns the named phase (nil if it did not run).
func (r *Result) Phase(name string) *Phase {
	if i := slices.IndexFunc(r.Phases, func(p Phase) bool { return p.Name == name }); i >= 0 {
		return &r.Phases[i]
	}
	return nil
}

// SummaryMarkdown renders the headline table (README) and the targets.
func (r *Result) SummaryMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s on %d CPUs (%s/%s, %s), %.0f s; settings: %d jobs, %d chains, %d graphs, %d batches of %d, %d clients, %d pull workers fetching %d%s, %d environments per function%s.\n\n",
		r.StartedAt.UTC().Format("2006-01-02 15:04 UTC"), r.Machine.CPUs, r.Machine.OS, r.Machine.Arch, r.Machine.GoVersion, r.Seconds,
		r.Settings.Jobs, r.Settings.Chains, r.Settings.Graphs, r.Settings.Batches, r.Settings.BatchWidth, r.Settings.Clients, r.Settings.Workers, r.Settings.FetchCount,
		r.Settings.pollingNote(), r.Settings.Concurrency, r.Settings.argsNote())
	b.WriteString("| phase | units | throughput | enqueue→start p50 / p99 | step→step p50 / p99 | DynamoDB req/unit | SQS req/unit | Lambda inv/unit | $ per M units (no compute / with local compute) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Phases {
		tp := fmt.Sprintf("%s %s/s", num(p.UnitsPerSecond), p.Unit)
		if p.Workflows > 0 {
			tp += fmt.Sprintf(" (%s wf/s)", num(p.WorkflowsPerSecond))
		}
		s2s := "–"
		if p.StepToStep != nil {
			s2s = fmt.Sprintf("%s / %s ms", num(p.StepToStep.P50), num(p.StepToStep.P99))
		}
		ddb := num(p.PerUnit.DynamoDB)
		if p.PerUnit.EmptyFetchDynamoDB > 0 {
			ddb = fmt.Sprintf("%s (%s without empty polls)", num(p.PerUnit.DynamoDB), num(p.DynamoDBPerUnitExclIdle()))
		}
		fmt.Fprintf(&b, "| %s | %d %ss | %s | %s / %s ms | %s | %s | %s | %s | %s / %s |\n", p.Name, p.Units, p.Unit, tp,
			num(p.EnqueueToStart.P50), num(p.EnqueueToStart.P99), s2s, ddb, num(p.PerUnit.SQS), num(p.PerUnit.Lambda),
			num(p.Cost.NoCompute), num(p.Cost.Total))
	}
	b.WriteString("\n" + r.CostMarkdown() + "\n" + r.TargetsMarkdown())
	if peer := r.PeerMarkdown(); peer != "" {
		b.WriteString("\n" + peer)
	}
	return b.String()
}

// CostMarkdown renders the cost of every phase beside the previous run and
// Step Functions, and where a workflow step's money goes.
func (r *Result) CostMarkdown() string {
	var b strings.Builder
	prev := "previous run"
	if r.Previous != nil {
		prev += " (" + r.Previous.StartedAt.UTC().Format("2006-01-02 15:04") + ")"
	}
	fmt.Fprintf(&b, "| $ per million units | this run | %s | Step Functions Standard | Step Functions Express |\n|---|---|---|---|---|\n", prev)
	for _, p := range r.Phases {
		was, sfStd, sfExp := "–", "–", "–"
		if r.Previous != nil {
			if c, ok := r.Previous.Cost[p.Name]; ok && c.Total > 0 {
				change := "same"
				if pct := math.Round(100 * (p.Cost.Total - c.Total) / c.Total); pct != 0 {
					change = fmt.Sprintf("%+.0f%%", pct)
				}
				was = fmt.Sprintf("$%s (%s)", num(c.Total), change)
			}
		}
		if p.Unit == "step" {
			sfStd, sfExp = "$"+num(r.StepFunctions.StandardPerMillionSteps), "$"+num(r.StepFunctions.ExpressPerMillionSteps)
		}
		fmt.Fprintf(&b, "| %s (per %s) | $%s | %s | %s | %s |\n", p.Name, p.Unit, num(p.Cost.Total), was, sfStd, sfExp)
	}
	b.WriteString("\nAll-in, beside the total ($ per million units; the total includes CloudWatch Logs: the access log line of each API request and the functions' lines at the deployed level, " + topology.DefaultLogLevel + "):\n\n")
	b.WriteString("| phase | all-in | of it CloudWatch Logs (bytes per unit) | X-Ray where tracing is on | storage, per month kept (bytes per unit) | all-in with a provisioned table |\n|---|---|---|---|---|---|\n")
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "| %s | $%s | $%s (%s) | +$%s | $%s (%s) | $%s |\n", p.Name, num(p.Cost.Total), num(p.Cost.Logs), num(p.Usage.LogBytes),
			num(p.Cost.XRay), num(p.Cost.StorageMonth), num(p.Usage.StoredBytes), num(p.Cost.Provisioned))
	}
	fmt.Fprintf(&b, "\nIdle, a month: $%s (the sweeper's ticks $%s, the SQS mappings' empty polls $%s; %s).\n", num(r.Idle.USD), num(r.Idle.SweeperUSD), num(r.Idle.PollsUSD), r.Idle.Note)
	steps := r.workflowPhases()
	if len(steps) == 0 {
		return b.String()
	}
	items := map[string]float64{} // item -> its largest share, for the order
	bd := make([]map[string]float64, len(steps))
	for i, p := range steps {
		bd[i] = USEast1.Breakdown(p)
		for k, v := range bd[i] {
			items[k] = max(items[k], v)
		}
	}
	keys := slices.Sorted(maps.Keys(items))
	sort.SliceStable(keys, func(a, c int) bool { return items[keys[a]] > items[keys[c]] })
	b.WriteString("\nWhere a workflow step's money goes ($ per million steps, by function and operation):\n\n| item |")
	for _, p := range steps {
		b.WriteString(" " + p.Name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(steps)) + "\n")
	for _, k := range keys {
		b.WriteString("| " + k + " |")
		for i := range steps {
			v := "–"
			if x, ok := bd[i][k]; ok {
				v = num(x)
			}
			b.WriteString(" " + v + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("| **total** |")
	for _, p := range steps {
		b.WriteString(" **" + num(p.Cost.Total) + "** |")
	}
	b.WriteString("\n")
	return b.String()
}

// workflowPhases are the phases of workflow steps but the paced ones.
func (r *Result) workflowPhases() []Phase {
	return slices.DeleteFunc(slices.Clone(r.Phases), func(p Phase) bool { return p.Unit != "step" || strings.HasSuffix(p.Name, "paced") })
}

// TargetsMarkdown renders the targets table.
func (r *Result) TargetsMarkdown() string {
	var b strings.Builder
	b.WriteString("| target | measured | goal | verdict | margin |\n|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		note := ""
		if t.Note != "" {
			note = " — " + t.Note
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s%s |\n", t.Name, num(t.Measured), t.Unit, t.limitText(), t.Verdict(), t.Margin, note)
	}
	return b.String()
}

// DetailMarkdown renders the per-operation breakdown of every phase,
// binaries, init times and the sweeper (docs/benchmark.md).
func (r *Result) DetailMarkdown() string {
	var b strings.Builder
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "**%s** (%d %ss in %.1f s): per %s ", p.Name, p.Units, p.Unit, p.Seconds, p.Unit)
		fmt.Fprintf(&b, "DynamoDB %s requests (%s RRU, %s WRU), SQS %s, Lambda %s (%s), API %s, EventBridge %s events in %s PutEvents, stream reads %s (free), idle SQS receives %s.\n\n",
			num(p.PerUnit.DynamoDB), num(p.PerUnit.ReadUnits), num(p.PerUnit.WriteUnits), num(p.PerUnit.SQS), num(p.PerUnit.Lambda),
			kv(p.PerUnit.LambdaByFunction), num(p.PerUnit.API), num(p.PerUnit.EventBridgeEvents), num(p.PerUnit.PutEvents),
			num(p.PerUnit.StreamReads), num(p.PerUnit.SQSIdleReceives))
		b.WriteString("| function operation | DynamoDB requests per " + p.Unit + " |\n|---|---|\n")
		for _, k := range slices.Sorted(maps.Keys(p.PerUnit.DynamoDBByOperation)) {
			fmt.Fprintf(&b, "| %s | %s |\n", k, num(p.PerUnit.DynamoDBByOperation[k]))
		}
		if len(p.PerUnit.SQSByOperation) > 0 {
			fmt.Fprintf(&b, "\nSQS per %s: %s\n", p.Unit, kv(p.PerUnit.SQSByOperation))
		}
		if p.EmptyFetches > 0 {
			fmt.Fprintf(&b, "\nEmpty FETCH polls: %d (%s DynamoDB requests per %s of the above).\n", p.EmptyFetches, num(p.PerUnit.EmptyFetchDynamoDB), p.Unit)
		}
		fmt.Fprintf(&b, "\nLogs per %s: %s bytes (functions %s, access log %s).\n", p.Unit, num(p.Usage.LogBytes), kv(p.PerUnit.LogBytes), num(p.PerUnit.AccessLogBytes))
		fmt.Fprintf(&b, "\nCost per million %ss: DynamoDB $%s, SQS $%s, Lambda requests $%s, Lambda compute $%s (local durations), API Gateway $%s, EventBridge $%s, CloudWatch Logs $%s; total $%s ($%s without compute).\n\n",
			p.Unit, num(p.Cost.DynamoDB), num(p.Cost.SQS), num(p.Cost.LambdaRequests), num(p.Cost.LambdaCompute), num(p.Cost.APIGateway),
			num(p.Cost.EventBridge), num(p.Cost.Logs), num(p.Cost.Total), num(p.Cost.NoCompute))
	}
	b.WriteString("| binary | target | size |\n|---|---|---|\n")
	for _, bin := range r.Binaries {
		fmt.Fprintf(&b, "| %s | %s | %.2f MB |\n", bin.Function, bin.Target, bin.MB())
	}
	b.WriteString("\n| function | init p50 (one at a time) | init max | starts | p50 with every environment starting at once |\n|---|---|---|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(r.Init)) {
		fmt.Fprintf(&b, "| %s | %s ms | %s ms | %d | %s ms |\n", k, num(r.Init[k].P50), num(r.Init[k].Max), r.Init[k].Count, num(r.InitUnderLoad[k].P50))
	}
	fmt.Fprintf(&b, "\nEmpty FETCH (calibration, %d polls): %s DynamoDB requests each (%s).\n", r.EmptyFetch.Fetches, num(r.EmptyFetch.DynamoDB), kv(r.EmptyFetch.ByOperation))
	fmt.Fprintf(&b, "\nSweeper: %d invocations during the run, %s DynamoDB requests per sweep (%s): $%s a month at one sweep a minute. %s\n",
		r.Sweeper.Invocations, num(r.Sweeper.DynamoDBPerSweep), kv(r.Sweeper.DynamoDBByOperation), num(r.Sweeper.USDPerMonthOnAWS), r.Sweeper.Note)
	fmt.Fprintf(&b, "\nStep Functions for comparison (per million steps, %s steps per workflow, %s s billed per step for Express): Standard $%s, Express $%s.\n",
		num(r.StepFunctions.StepsPerWorkflow), num(r.StepFunctions.SecondsPerStep), num(r.StepFunctions.StandardPerMillionSteps), num(r.StepFunctions.ExpressPerMillionSteps))
	if r.Create.Width > 0 {
		fmt.Fprintf(&b, "\nCreating a workflow of %d jobs (one POST, the jobs left unclaimed): answered %d in %s s (group) and %s s (batch); every first job written after %s s (group) and %s s (batch). %s\n",
			r.Create.Width, r.Create.Status, num(r.Create.GroupAnswerSeconds), num(r.Create.BatchAnswerSeconds), num(r.Create.GroupSeconds), num(r.Create.BatchSeconds), r.Create.Note)
	}
	fmt.Fprintf(&b, "\nLarge batch (BENCH_BIG=1): %s\n", r.Big.Note)
	return b.String()
}

func kv[V float64 | int](m map[string]V) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %s", k, num(float64(m[k]))))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// SplitRun measures enqueueing and fetching apart, in the shape of issue
// 16's side-by-side comparison with openjobspec/ojs-backend-sqs: Jobs PUSHes
// into a pull-mode queue nothing fetches, then that backlog drained one job a
// FETCH, then FetchCount a FETCH (DynamoDB requests per job, empty FETCHes
// left out).
type SplitRun struct {
	Jobs               int     `json:"jobs"`
	FetchCount         int     `json:"fetch_count"`
	EnqueuePerSecond   float64 `json:"enqueue_jobs_per_second"`
	EnqueueLatency     Latency `json:"enqueue_round_trip"`
	EnqueueDynamoDB    float64 `json:"enqueue_dynamodb_requests_per_job"`
	FetchAck1PerSecond float64 `json:"fetch1_ack_jobs_per_second"`
	FetchAck1DynamoDB  float64 `json:"fetch1_ack_dynamodb_requests_per_job"`
	FetchAckNPerSecond float64 `json:"fetchn_ack_jobs_per_second,omitempty"`
	FetchAckNDynamoDB  float64 `json:"fetchn_ack_dynamodb_requests_per_job,omitempty"`
}

// PeerRecorded are openjobspec/ojs-backend-sqs's figures as issue 16 records
// them (on the same emulators); a reference, not measured by this benchmark
// (docs/benchmark.md).
var PeerRecorded = struct {
	EnqueuePerSecond, FetchAck1PerSecond, FetchAck10PerSecond, ChainsPerSecond float64
	StepToStepP50, StepToStepP99                                               float64
	RequestsPerJob, RequestsPerChain                                           float64
}{217, 87, 133, 18.0, 20, 28, 15, 63}

// PeerMarkdown renders this run's figures beside the peer's recorded ones,
// "x the peer" oriented so that above 1 is better here (issue 16's goal: 2).
func (r *Result) PeerMarkdown() string {
	type row struct {
		name, unit   string
		ours, peer   float64
		higherBetter bool
	}
	var rows []row
	if s := r.Split; s != nil {
		rows = append(rows, row{"enqueue (POST /jobs, nothing fetching)", "jobs/s", s.EnqueuePerSecond, PeerRecorded.EnqueuePerSecond, true},
			row{"fetch+ack from a backlog, FETCH of 1", "jobs/s", s.FetchAck1PerSecond, PeerRecorded.FetchAck1PerSecond, true})
		if s.FetchCount == 10 {
			rows = append(rows, row{"fetch+ack from a backlog, FETCH of 10", "jobs/s", s.FetchAckNPerSecond, PeerRecorded.FetchAck10PerSecond, true})
		}
	}
	chains := r.Phase("pull chains")
	if chains != nil {
		rows = append(rows, row{"3-step chains, pull mode", "chains/s", chains.WorkflowsPerSecond, PeerRecorded.ChainsPerSecond, true})
	}
	if p := r.Phase("pull chains paced"); p != nil && p.StepToStep != nil {
		rows = append(rows, row{"step→step p50, pull chains at a steady rate", "ms", p.StepToStep.P50, PeerRecorded.StepToStepP50, false},
			row{"step→step p99, pull chains at a steady rate", "ms", p.StepToStep.P99, PeerRecorded.StepToStepP99, false})
	}
	if p := r.Phase("pull jobs"); p != nil {
		rows = append(rows, row{"AWS requests per job, pull mode (DynamoDB and SQS)", "requests", p.DynamoDBPerUnitExclIdle() + p.PerUnit.SQS, PeerRecorded.RequestsPerJob, false})
	}
	if chains != nil {
		rows = append(rows, row{"AWS requests per 3-step chain, pull mode", "requests", 3 * (chains.DynamoDBPerUnitExclIdle() + chains.PerUnit.SQS), PeerRecorded.RequestsPerChain, false})
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| figure (issue 16's side-by-side) | this run | openjobspec/ojs-backend-sqs, as issue 16 records it (not measured here) | x the peer (above 1: better here; goal 2) |\n|---|---|---|---|\n")
	for _, x := range rows {
		ratio := "–"
		if x.ours > 0 && x.peer > 0 {
			v := x.ours / x.peer
			if !x.higherBetter {
				v = x.peer / x.ours
			}
			ratio = fmt.Sprintf("%.2fx", v)
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s %s | %s |\n", x.name, num(round(x.ours, 2)), x.unit, num(x.peer), x.unit, ratio)
	}
	return b.String()
}
