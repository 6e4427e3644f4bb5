package bench

import (
	"fmt"
	"strings"
)

// Goals of the benchmark (issue 6). Throughput goals are twice the
// baseline measured on these emulators on a 2-core machine.
const (
	GoalDynamoDBPerJob    = 5
	GoalSQSPerJob         = 3
	GoalDynamoDBPerChain  = 18
	GoalPullJobsPerSecond = 2 * 260
	GoalChainsPerSecond   = 2 * 45
	// All-in dollars per million workflow steps (issue 35): push mode,
	// pull mode, and push mode on a provisioned table.
	GoalUSDPerMillionSteps            = 5
	GoalUSDPerMillionStepsPull        = 7
	GoalUSDPerMillionStepsProvisioned = 3
	GoalBinaryMB                      = 12
	GoalInitMS                        = 50
	GoalBigJobs                       = 100000
	// GoalCreateSeconds is the answer to the creation of the largest
	// workflow, well inside API Gateway's 29 s integration timeout.
	GoalCreateSeconds = 5
)

// Targets checks a result against the goals.
func Targets(r *Result) []Target {
	var ts []Target
	for _, name := range []string{"push jobs", "pull jobs"} {
		if p := r.Phase(name); p != nil {
			t := Check("DynamoDB requests per job, "+p.Mode+" mode (enqueue, fetch, ack, events)", p.DynamoDBPerUnitExclIdle(), GoalDynamoDBPerJob, true, "requests")
			if p.Mode == "pull" {
				t.Note = fmt.Sprintf("FETCH of up to %d; empty FETCH polls excluded (%s per job)", r.Settings.FetchCount, num(p.PerUnit.EmptyFetchDynamoDB))
			}
			ts = append(ts, t, Check("SQS requests per job, "+p.Mode+" mode", p.PerUnit.SQS, GoalSQSPerJob, true, "requests"))
		}
	}
	for _, name := range []string{"push chains", "pull chains"} {
		if p := r.Phase(name); p != nil {
			t := Check("DynamoDB requests per 3-step chain, "+p.Mode+" mode", 3*p.DynamoDBPerUnitExclIdle(), GoalDynamoDBPerChain, true, "requests")
			if p.PerUnit.EmptyFetchDynamoDB > 0 {
				t.Note = "empty FETCH polls excluded"
			}
			ts = append(ts, t)
		}
	}
	if p := r.Phase("pull jobs"); p != nil {
		ts = append(ts, Check("fetch+ack jobs per second (pull mode)", p.UnitsPerSecond, GoalPullJobsPerSecond, false, "jobs/s"))
	}
	for _, name := range []string{"push chains", "pull chains"} {
		if p := r.Phase(name); p != nil {
			ts = append(ts, Check("3-step chains per second, "+p.Mode+" mode", p.WorkflowsPerSecond, GoalChainsPerSecond, false, "chains/s"))
		}
	}
	for _, p := range r.workflowPhases() {
		goal := float64(GoalUSDPerMillionSteps)
		if p.Mode == "pull" {
			goal = GoalUSDPerMillionStepsPull
		}
		t := Check("$ per million workflow steps, "+p.Name+", all-in", p.Cost.Total, goal, true, "USD")
		t.Note = fmt.Sprintf("CloudWatch Logs $%s included; $%s without Lambda compute, which is measured against the emulators; beside it: X-Ray $%s where tracing is on, storage $%s a month kept",
			num(p.Cost.Logs), num(p.Cost.NoCompute), num(p.Cost.XRay), num(p.Cost.StorageMonth))
		ts = append(ts, t)
	}
	if p := r.Phase("push chains"); p != nil {
		t := Check(fmt.Sprintf("$ per million workflow steps, push chains, provisioned at %s steps/s", num(ProvisionedRate)), p.Cost.Provisioned, GoalUSDPerMillionStepsProvisioned, true, "USD")
		t.Note = fmt.Sprintf("a provisioned table with auto scaling at %.0f%% utilisation instead of on-demand (DynamoDB $%s of the on-demand $%s)",
			100*ProvisionedUtilization, num(p.Cost.Provisioned-p.Cost.Total+p.Cost.DynamoDB), num(p.Cost.DynamoDB))
		ts = append(ts, t)
	}
	var maxBin Binary
	for _, b := range r.Binaries {
		if b.Target == "linux/arm64" && b.Bytes > maxBin.Bytes {
			maxBin = b
		}
	}
	if maxBin.Bytes > 0 {
		t := Check("largest function binary (linux/arm64)", maxBin.MB(), GoalBinaryMB, true, "MB")
		t.Note = maxBin.Function
		ts = append(ts, t)
	}
	var worst float64
	var worstFn string
	for fn, l := range r.Init {
		if l.P50 > worst {
			worst, worstFn = l.P50, fn
		}
	}
	if worstFn != "" {
		t := Check("function init time (p50 of the slowest function, host build)", worst, GoalInitMS, true, "ms")
		t.Note = fmt.Sprintf("%s; max %s ms", worstFn, num(r.Init[worstFn].Max))
		ts = append(ts, t)
	}
	if r.Create.Width > 0 {
		t := Check(fmt.Sprintf("create a %d-job workflow: the POST's answer (slowest of a group and a batch)", r.Create.Width),
			max(r.Create.GroupAnswerSeconds, r.Create.BatchAnswerSeconds), GoalCreateSeconds, true, "s")
		t.Note = fmt.Sprintf("answered %d; every first job written after %s s", r.Create.Status, num(max(r.Create.GroupSeconds, r.Create.BatchSeconds)))
		if r.Create.Note != "" {
			t.Note += "; " + r.Create.Note
		}
		if r.Create.GroupAnswerSeconds == 0 {
			t.Pass, t.Margin = false, "failed"
		}
		ts = append(ts, t)
	}
	big := Target{Name: "100,000 jobs in batches, callbacks fired once", Limit: GoalBigJobs, Unit: "jobs", Margin: "not run", Note: r.Big.Note}
	if r.Big.Run {
		big.Measured = float64(r.Big.Jobs)
		big.Pass = r.Big.CallbacksFiredOnce && r.Big.Jobs >= GoalBigJobs
		big.Margin = fmt.Sprintf("%.0f s", r.Big.Seconds)
	}
	ts = append(ts, big)
	return ts
}

// ReplaceBetween replaces the text between the lines holding begin and
// end markers (kept) with content; ok is false when a marker is missing.
func ReplaceBetween(doc, begin, end, content string) (string, bool) {
	i := strings.Index(doc, begin)
	if i < 0 {
		return doc, false
	}
	i += len(begin)
	j := strings.Index(doc[i:], end)
	if j < 0 {
		return doc, false
	}
	return doc[:i] + "\n" + strings.TrimSpace(content) + "\n" + doc[i+j:], true
}
