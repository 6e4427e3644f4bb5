package httpapi

import (
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/lifecycle"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
)

// ImplementationVersion is this product's version.
const ImplementationVersion = "0.1.0"

// Manifest is the conformance manifest (ojs-http-binding.md section 21). It
// states only what is implemented: capabilities that are false here are
// not served.
func Manifest() map[string]any {
	return map[string]any{
		"specversion": job.SpecVersion,
		"ojs_version": job.SpecVersion,
		"implementation": map[string]any{
			"name": "ojs-serverless", "version": ImplementationVersion, "language": "go",
			"homepage": "https://github.com/ojs-aws/ojs-serverless",
		},
		// Levels 0 to 4 are implemented: core, reliability, scheduling
		// (delays, cron, TTL), workflows, and priority, unique jobs
		// (strong: a conditional transaction per key), batches, pause and
		// resume, stats and per-queue rate limits (applied to FETCH).
		"conformance_level": 4,
		"protocols":         []string{"http"},
		"backend":           "dynamodb",
		"capabilities": map[string]bool{
			"batch_enqueue": true, "dead_letter": true, "delayed_jobs": true, "job_ttl": true,
			"priority_queues": true, "heartbeat": true, "visibility_timeout": true, "retry_policies": true,
			"pending_jobs": true, "push_delivery_lambda": true,
			"cron_jobs": true, "workflows": true, "unique_jobs": true, "pause_resume": true,
			"rate_limiting": true, "schema_validation": false, "events": true, "queue_stats": true,
			"dead_letter_retry": true, "worker_directives": true, "eventbridge_events": true,
			"dead_letter_retention": true, "graceful_shutdown": true,
			// FETCH's wait_ms (a long poll, worker protocol 6.1).
			"fetch_wait": true,
		},
		"limits": map[string]any{
			"max_envelope_bytes": job.MaxEnvelopeBytes, "max_stored_job_bytes": store.MaxJobItemBytes, "max_meta_bytes": job.MaxMetaBytes,
			"max_result_bytes": job.MaxResultBytes, "max_packed_result_bytes": store.MaxPackedResultBytes, "max_result_ttl": job.MaxResultTTL, "max_request_bytes": MaxBodyBytes, "supported_compression": SupportedEncodings,
			"max_batch_jobs": lifecycle.MaxBulk, "max_atomic_batch_jobs": store.MaxBatch, "max_fetch_count": lifecycle.MaxFetch,
			"max_fetch_wait_ms": lifecycle.MaxFetchWait.Milliseconds(), "min_priority": job.MinPriority, "max_priority": job.MaxPriority,
			"max_workflow_depth": wfdef.MaxDepth, "max_workflow_jobs": wfdef.MaxJobs,
		},
		"uniqueness_strength": "strong",
		// Only extensions whose conformance suite passes in full here
		// (localstack/cmd/ojs-conformance, docs/admin.md): admin-api,
		// dead-letter, observability, graceful-shutdown, serverless, progress,
		// encryption (its server side: encoded args and codec meta kept as
		// sent), schema-registry, job-versioning, backpressure, middleware,
		// fair-scheduling, webhooks, rate-limiting and durable-execution; and
		// the experimental multi-tenancy, ml-resources (resource-aware
		// FETCH, docs/ml-resources.md) and federation (a deployment's part
		// of it: metadata kept, its region in the health answer, geo-pinned
		// jobs for other regions refused; docs/federation.md).
		// And the experimental ai-agents: attributes checked, delegation
		// bounded through the parent's chain, token budgets enforced on
		// progress reports (docs/ai-agents.md).
		"extensions": map[string]any{
			"official": extensions("urn:ojs:ext:", "1.0.0", "admin-api", "dead-letter", "observability", "graceful-shutdown", "serverless",
				"progress", "encryption", "schema-registry", "job-versioning", "backpressure", "middleware", "fair-scheduling", "webhooks",
				"rate-limiting", "durable-execution"),
			"experimental": extensions("urn:ojs:ext:experimental:", "0.1.0", "push-delivery-aws-lambda", "multi-tenancy", "ml-resources",
				"federation", "ai-agents"),
		},
		"endpoints": map[string]string{"manifest": "/ojs/manifest", "health": "/ojs/v1/health", "base_path": "/ojs/v1", "events": "/ojs/v1/events", "cron": "/ojs/v1/cron",
			"admin": "/ojs/v1/admin", "metrics": "/metrics", "ready": "/ready", "console": ConsolePrefix},
	}
}

// extensions lists the named extensions, each with its URI (prefix and
// name) and version.
func extensions(prefix, version string, names ...string) []map[string]string {
	out := make([]map[string]string, len(names))
	for i, n := range names {
		out[i] = map[string]string{"name": n, "uri": prefix + n, "version": version}
	}
	return out
}
