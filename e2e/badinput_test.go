package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// badCase is one malformed or hostile request and the exact answer the
// HTTP binding requires. In path, body and headers, {q} is replaced by a
// queue name of the case's own and {id} by a fresh UUIDv7, so the checks
// after the catalog can show that nothing was written.
type badCase struct {
	name, method, path string
	body               string // sent as is for POST/PUT/PATCH/DELETE (even when empty)
	hdr                []string
	status             int
	code               string
}

const (
	okJob = `{"type":"bad.input","args":[],"options":{"queue":"{q}"}}`
	// okLeaf is a valid workflow job on the case's queue.
	okLeaf = `{"type":"bad.input","args":[],"options":{"queue":"{q}"}}`
)

func repeatJoin(s string, n int) string { return strings.TrimSuffix(strings.Repeat(s+",", n), ",") }

func nest(open, close string, depth int, inner string) string {
	return strings.Repeat(open, depth) + inner + strings.Repeat(close, depth)
}

// deepWorkflow nests chains depth levels deep around one job.
// bindingCodes are the error codes of ojs-http-binding.md 16.3, and
// conflict, which the public conformance suite requires.
var bindingCodes = map[string]bool{"handler_error": true, "timeout": true, "cancelled": true, "invalid_payload": true,
	"invalid_request": true, "not_found": true, "backend_error": true, "rate_limited": true, "duplicate": true, "queue_paused": true,
	"schema_validation": true, "unsupported": true, "conflict": true}

func deepWorkflow(depth int) string {
	return nest(`{"type":"chain","steps":[`, `]}`, depth, okLeaf)
}

func badCatalog() []badCase {
	big := func(n int) string { return strings.Repeat("x", n) }
	wfID := "{id}"
	return []badCase{
		// Framing and encoding of the body.
		{"push truncated json", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[`, nil, 400, "invalid_payload"},
		{"push empty body", "POST", "/ojs/v1/jobs", ``, nil, 400, "invalid_payload"},
		{"push whitespace body", "POST", "/ojs/v1/jobs", " \n\t ", nil, 400, "invalid_payload"},
		{"push array body", "POST", "/ojs/v1/jobs", `[` + okJob + `]`, nil, 400, "invalid_request"},
		{"push string body", "POST", "/ojs/v1/jobs", `"bad.input"`, nil, 400, "invalid_request"},
		{"push null body", "POST", "/ojs/v1/jobs", `null`, nil, 400, "invalid_request"},
		{"push trailing garbage", "POST", "/ojs/v1/jobs", okJob + ` x`, nil, 400, "invalid_payload"},
		{"push two objects", "POST", "/ojs/v1/jobs", okJob + okJob, nil, 400, "invalid_payload"},
		{"push byte order mark", "POST", "/ojs/v1/jobs", "\ufeff" + okJob, nil, 400, "invalid_payload"},
		{"push invalid utf-8 in args", "POST", "/ojs/v1/jobs", "{\"type\":\"bad.input\",\"args\":[\"\xff\xfe\"],\"options\":{\"queue\":\"{q}\"}}", nil, 400, "invalid_request"},
		{"push raw NUL in string", "POST", "/ojs/v1/jobs", "{\"type\":\"bad.input\",\"args\":[\"a\x00b\"],\"options\":{\"queue\":\"{q}\"}}", nil, 400, "invalid_payload"},
		{"push escaped NUL in type", "POST", "/ojs/v1/jobs", `{"type":"bad.input\u0000","args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push non-ascii type", "POST", "/ojs/v1/jobs", `{"type":"émail.send","args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push right-to-left override in queue", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}\u202e"}}`, nil, 400, "invalid_request"},
		{"push args nested past the decoder's depth", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":` + nest("[", "]", 10001, "") + `,"options":{"queue":"{q}"}}`, nil, 400, "invalid_payload"},

		// Content type and protocol headers.
		{"push text/plain", "POST", "/ojs/v1/jobs", okJob, []string{"Content-Type", "text/plain"}, 400, "invalid_request"},
		{"push application/xml", "POST", "/ojs/v1/jobs", okJob, []string{"Content-Type", "application/xml"}, 400, "invalid_request"},
		{"push form encoded", "POST", "/ojs/v1/jobs", "type=bad.input", []string{"Content-Type", "application/x-www-form-urlencoded"}, 400, "invalid_request"},
		{"push malformed content type", "POST", "/ojs/v1/jobs", okJob, []string{"Content-Type", "application/json; charset"}, 400, "invalid_request"},
		{"batch multipart", "POST", "/ojs/v1/jobs/batch", `{"jobs":[` + okJob + `]}`, []string{"Content-Type", "multipart/form-data; boundary=x"}, 400, "invalid_request"},
		{"unsupported OJS version", "POST", "/ojs/v1/jobs", okJob, []string{"OJS-Version", "2.0"}, 422, "unsupported"},

		// Sizes.
		{"push body over 4 MiB", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":["` + big(4<<20+1) + `"],"options":{"queue":"{q}"}}`, nil, 413, "payload_too_large"},
		{"batch body over 4 MiB", "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"bad.input","args":["` + big(4<<20) + `"],"options":{"queue":"{q}"}}]}`, nil, 413, "payload_too_large"},
		{"workflow body over 4 MiB", "POST", "/ojs/v1/workflows", `{"type":"chain","steps":[{"type":"bad.input","args":["` + big(4<<20) + `"],"options":{"queue":"{q}"}}]}`, nil, 413, "payload_too_large"},
		{"ack body over 4 MiB", "POST", "/ojs/v1/workers/ack", `{"job_id":"{id}","result":"` + big(4<<20) + `"}`, nil, 413, "payload_too_large"},
		{"push envelope over 1 MiB", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":["` + big(1<<20) + `"],"options":{"queue":"{q}"}}`, nil, 413, "payload_too_large"},
		{"push meta over 64 KiB", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"meta":{"m":"` + big(70<<10) + `"},"options":{"queue":"{q}"}}`, nil, 413, "payload_too_large"},
		{"push type over 255 bytes", "POST", "/ojs/v1/jobs", `{"type":"a` + big(300) + `","args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push queue over 128 bytes", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}` + big(130) + `"}}`, nil, 400, "invalid_request"},
		{"push 51 tags", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","tags":[` + repeatJoin(`"t"`, 51) + `]}}`, nil, 400, "invalid_request"},
		{"ack result over 1 MiB", "POST", "/ojs/v1/workers/ack", `{"job_id":"{id}","result":{"r":"` + big(1<<20) + `"}}`, nil, 413, "payload_too_large"},
		{"nack message over 64 KiB", "POST", "/ojs/v1/workers/nack", `{"job_id":"{id}","error":{"message":"` + big(70<<10) + `"}}`, nil, 413, "payload_too_large"},

		// Wrong types and values in a PUSH.
		{"push type is a number", "POST", "/ojs/v1/jobs", `{"type":7,"args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push args is an object", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":{"a":1},"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push args is null", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":null,"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push missing args", "POST", "/ojs/v1/jobs", `{"type":"bad.input","options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push options is an array", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":["{q}"]}`, nil, 400, "invalid_request"},
		{"push meta is an array", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"meta":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push unknown named priority", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","priority":"urgent"}}`, nil, 400, "invalid_request"},
		{"push priority out of range", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","priority":1000}}`, nil, 400, "invalid_request"},
		{"push fractional priority", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","priority":1.5}}`, nil, 400, "invalid_request"},
		{"push negative timeout", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","timeout_ms":-1}}`, nil, 400, "invalid_request"},
		{"push timeout overflowing int64", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","timeout_ms":1e300}}`, nil, 400, "invalid_request"},
		{"push scheduled_at in words", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","delay_until":"tomorrow"}}`, nil, 400, "invalid_request"},
		{"push scheduled_at without zone", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","delay_until":"2030-01-01T00:00:00"}}`, nil, 400, "invalid_request"},
		{"push expires_at is a number", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"expires_at":1700000000,"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push negative max_attempts", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","retry":{"max_attempts":-1}}}`, nil, 422, "validation_error"},
		{"push retry is a string", "POST", "/ojs/v1/jobs", `{"type":"bad.input","args":[],"options":{"queue":"{q}","retry":"forever"}}`, nil, 400, "invalid_request"},
		{"push id not a uuid", "POST", "/ojs/v1/jobs", `{"id":"job-1","type":"bad.input","args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push id uppercase", "POST", "/ojs/v1/jobs", `{"id":"019414D4-8B2E-7C3A-B5D1-F0E2A3B4C5D6","type":"bad.input","args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push id uuid v4", "POST", "/ojs/v1/jobs", `{"id":"1b4e28ba-2fa1-41d2-883f-0016d3cca427","type":"bad.input","args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		{"push specversion 2.0", "POST", "/ojs/v1/jobs", `{"specversion":"2.0","type":"bad.input","args":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},
		// Attribute names are case-sensitive (JSON Schema semantics): "Type"
		// is an unknown attribute, so the job has no type.
		{"push attribute names in another case", "POST", "/ojs/v1/jobs", `{"Type":"bad.input","ARGS":[],"options":{"queue":"{q}"}}`, nil, 400, "invalid_request"},

		// Batches.
		{"batch jobs is an object", "POST", "/ojs/v1/jobs/batch", `{"jobs":` + okJob + `}`, nil, 400, "invalid_request"},
		{"batch without jobs (a job instead)", "POST", "/ojs/v1/jobs/batch", okJob, nil, 400, "invalid_request"},
		{"batch empty", "POST", "/ojs/v1/jobs/batch", `{"jobs":[]}`, nil, 400, "invalid_request"},
		{"batch of 1001 jobs", "POST", "/ojs/v1/jobs/batch", `{"jobs":[` + repeatJoin(okJob, 1001) + `]}`, nil, 400, "invalid_request"},
		{"batch atomic over 100 jobs", "POST", "/ojs/v1/jobs/batch", `{"atomicity":"atomic","jobs":[` + repeatJoin(okJob, 101) + `]}`, nil, 422, "validation_error"},
		{"batch unknown atomicity", "POST", "/ojs/v1/jobs/batch", `{"atomicity":"mostly","jobs":[` + okJob + `]}`, nil, 400, "invalid_request"},
		{"batch with one invalid job", "POST", "/ojs/v1/jobs/batch", `{"jobs":[` + okJob + `,` + okJob + `,{"type":"bad.input","args":"x","options":{"queue":"{q}"}}]}`, nil, 400, "invalid_request"},
		{"batch with a number for a job", "POST", "/ojs/v1/jobs/batch", `{"jobs":[` + okJob + `,42]}`, nil, 400, "invalid_request"},
		{"batch with duplicate ids", "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"id":"{id}","type":"bad.input","args":[],"options":{"queue":"{q}"}},{"id":"{id}","type":"bad.input","args":[],"options":{"queue":"{q}"}}]}`, nil, 400, "invalid_request"},

		// Workflows: nothing may be created, no job may reach the queue.
		{"workflow malformed json", "POST", "/ojs/v1/workflows", `{"type":"chain","steps":[` + okLeaf, nil, 400, "invalid_payload"},
		{"workflow unknown kind", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"dag","steps":[` + okLeaf + `]}`, nil, 400, "invalid_workflow"},
		{"workflow chain without steps", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"chain","steps":[]}`, nil, 400, "invalid_workflow"},
		{"workflow group with steps", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"group","steps":[` + okLeaf + `]}`, nil, 400, "invalid_workflow"},
		{"workflow nested 6 deep", "POST", "/ojs/v1/workflows", deepWorkflow(6), nil, 400, "invalid_workflow"},
		{"workflow nested 1000 deep", "POST", "/ojs/v1/workflows", deepWorkflow(1000), nil, 400, "invalid_workflow"},
		{"workflow nested past the decoder's depth", "POST", "/ojs/v1/workflows", deepWorkflow(6000), nil, 400, "invalid_payload"},
		{"workflow job with an id", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"chain","steps":[{"id":"{id}","type":"bad.input","args":[],"options":{"queue":"{q}"}}]}`, nil, 400, "invalid_workflow"},
		{"workflow batch without callbacks", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"batch","jobs":[` + okLeaf + `]}`, nil, 400, "invalid_workflow"},
		{"workflow callback is a workflow", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"batch","jobs":[` + okLeaf + `],"callbacks":{"on_complete":{"type":"group","jobs":[` + okLeaf + `]}}}`, nil, 400, "invalid_workflow"},
		{"workflow id not a uuid", "POST", "/ojs/v1/workflows", `{"id":"wf-1","type":"chain","steps":[` + okLeaf + `]}`, nil, 400, "invalid_workflow"},
		{"workflow with one invalid job", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"group","jobs":[` + okLeaf + `,{"type":"bad.input","args":[],"options":{"queue":"Not A Queue"}}]}`, nil, 400, "invalid_workflow"},
		{"workflow pending job", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"chain","steps":[{"type":"bad.input","args":[],"options":{"queue":"{q}","pending":true}}]}`, nil, 400, "invalid_workflow"},
		{"workflow of 10001 jobs", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"group","jobs":[` + repeatJoin(`{"type":"b.i","args":[],"options":{"queue":"{q}"}}`, 10001) + `]}`, nil, 400, "invalid_workflow"},
		{"workflow name of 1 MiB", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"chain","name":"` + big(1<<20) + `","steps":[` + okLeaf + `]}`, nil, 400, "invalid_workflow"},
		{"workflow callbacks in a group", "POST", "/ojs/v1/workflows", `{"id":"` + wfID + `","type":"group","jobs":[` + okLeaf + `],"callbacks":{"on_complete":` + okLeaf + `}}`, nil, 400, "invalid_workflow"},

		// Worker calls.
		{"fetch without queues", "POST", "/ojs/v1/workers/fetch", `{"queue":"{q}"}`, nil, 400, "invalid_request"},
		{"fetch queues is a string", "POST", "/ojs/v1/workers/fetch", `{"queues":"{q}"}`, nil, 400, "invalid_request"},
		{"fetch invalid queue name", "POST", "/ojs/v1/workers/fetch", `{"queues":["{q}","Q!"]}`, nil, 400, "invalid_request"},
		{"fetch count zero", "POST", "/ojs/v1/workers/fetch", `{"queues":["{q}"],"count":0}`, nil, 400, "invalid_request"},
		{"fetch count as string", "POST", "/ojs/v1/workers/fetch", `{"queues":["{q}"],"count":"5"}`, nil, 400, "invalid_request"},
		{"fetch count over 100", "POST", "/ojs/v1/workers/fetch", `{"queues":["{q}"],"count":101}`, nil, 400, "invalid_request"},
		{"fetch worker id over 256", "POST", "/ojs/v1/workers/fetch", `{"queues":["{q}"],"worker_id":"` + big(257) + `"}`, nil, 400, "invalid_request"},
		{"fetch zero visibility", "POST", "/ojs/v1/workers/fetch", `{"queues":["{q}"],"visibility_timeout_ms":0}`, nil, 400, "invalid_request"},
		{"fetch from 10000 queues", "POST", "/ojs/v1/workers/fetch", `{"queues":[` + repeatJoin(`"{q}"`, 10000) + `]}`, nil, 400, "invalid_request"},
		{"ack without job_id", "POST", "/ojs/v1/workers/ack", `{"id":"{id}"}`, nil, 400, "invalid_request"},
		{"ack job_id not a uuid", "POST", "/ojs/v1/workers/ack", `{"job_id":"job_1"}`, nil, 400, "invalid_request"},
		{"ack job_id is a number", "POST", "/ojs/v1/workers/ack", `{"job_id":12345}`, nil, 400, "invalid_request"},
		{"ack job_id in another case", "POST", "/ojs/v1/workers/ack", `{"JOB_ID":"{id}"}`, nil, 400, "invalid_request"},
		{"ack unknown job", "POST", "/ojs/v1/workers/ack", `{"job_id":"{id}"}`, nil, 404, "not_found"},
		{"ack attempt 0", "POST", "/ojs/v1/workers/ack", `{"job_id":"{id}","attempt":0}`, nil, 400, "invalid_request"},
		{"nack attempt as string", "POST", "/ojs/v1/workers/nack", `{"job_id":"{id}","attempt":"1","error":{"message":"m"}}`, nil, 400, "invalid_request"},
		{"nack without error", "POST", "/ojs/v1/workers/nack", `{"job_id":"{id}","message":"boom"}`, nil, 400, "invalid_request"},
		{"nack error is a string", "POST", "/ojs/v1/workers/nack", `{"job_id":"{id}","error":"boom"}`, nil, 400, "invalid_request"},
		{"nack 3 MB backtrace of an unknown job", "POST", "/ojs/v1/workers/nack", `{"job_id":"{id}","error":{"message":"m","backtrace":[` + repeatJoin(`"`+big(60<<10)+`"`, 50) + `]}}`, nil, 404, "not_found"},
		{"nack unknown job", "POST", "/ojs/v1/workers/nack", `{"job_id":"{id}","error":{"message":"m"}}`, nil, 404, "not_found"},
		{"heartbeat without worker_id", "POST", "/ojs/v1/workers/heartbeat", `{"workerId":"w-{q}"}`, nil, 400, "invalid_request"},
		{"heartbeat unknown state", "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-{q}","state":"sleeping"}`, nil, 400, "invalid_request"},
		{"heartbeat negative active_jobs", "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-{q}","active_jobs":-1}`, nil, 400, "invalid_request"},
		{"heartbeat bad active job id", "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-{q}","active_jobs":["job_1"]}`, nil, 400, "invalid_request"},
		{"heartbeat 101 active jobs", "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-{q}","active_job_ids":[` + repeatJoin(`"{id}"`, 101) + `]}`, nil, 400, "invalid_request"},
		{"heartbeat hostname of 1 MiB", "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-{q}","hostname":"` + big(1<<20) + `"}`, nil, 400, "invalid_request"},
		{"heartbeat 100000 queues", "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-{q}","queues":[` + repeatJoin(`"{q}"`, 100000) + `]}`, nil, 400, "invalid_request"},

		// Ids in paths.
		{"info id not a uuid", "GET", "/ojs/v1/jobs/not-a-uuid", "", nil, 400, "invalid_request"},
		{"info id uppercase", "GET", "/ojs/v1/jobs/019414D4-8B2E-7C3A-B5D1-F0E2A3B4C5D6", "", nil, 400, "invalid_request"},
		{"info id percent-encoded NUL", "GET", "/ojs/v1/jobs/%00", "", nil, 400, "invalid_request"},
		{"info id of 10000 bytes", "GET", "/ojs/v1/jobs/" + big(10000), "", nil, 400, "invalid_request"},
		{"info unknown job", "GET", "/ojs/v1/jobs/{id}", "", nil, 404, "not_found"},
		{"cancel id not a uuid", "DELETE", "/ojs/v1/jobs/x", "", nil, 400, "invalid_request"},
		{"activate id not a uuid", "POST", "/ojs/v1/jobs/x/activate", "", nil, 400, "invalid_request"},
		{"workflow get id not a uuid", "GET", "/ojs/v1/workflows/wf-1", "", nil, 400, "invalid_request"},
		{"workflow cancel invalid utf-8 id", "DELETE", "/ojs/v1/workflows/%ff%fe", "", nil, 400, "invalid_request"},
		{"dead letter get id not a uuid", "GET", "/ojs/v1/dead-letter/x", "", nil, 400, "invalid_request"},
		{"dead letter retry id not a uuid", "POST", "/ojs/v1/dead-letter/x/retry", "", nil, 400, "invalid_request"},
		{"dead letter retry unknown override", "POST", "/ojs/v1/dead-letter/{id}/retry", `{"override":{"priority":5}}`, nil, 400, "invalid_request"},
		{"dead letter delete id not a uuid", "DELETE", "/ojs/v1/dead-letter/x", "", nil, 400, "invalid_request"},
		{"stats of an invalid queue name", "GET", "/ojs/v1/queues/Not%20A%20Queue/stats", "", nil, 400, "invalid_request"},
		{"pause an invalid queue name", "POST", "/ojs/v1/queues/%ff/pause", "", nil, 400, "invalid_request"},
		{"quiet a worker id of 300 bytes", "POST", "/ojs/v1/admin/workers/" + big(300) + "/quiet", "", nil, 400, "invalid_request"},

		// Routes and methods.
		{"unknown route", "GET", "/ojs/v1/nothing-here", "", nil, 404, "not_found"},
		{"unknown version prefix", "GET", "/ojs/v2/jobs/{id}", "", nil, 404, "not_found"},
		{"trailing path segment", "GET", "/ojs/v1/jobs/{id}/extra", "", nil, 404, "not_found"},
		{"PUT on jobs", "PUT", "/ojs/v1/jobs", okJob, nil, 405, "method_not_allowed"},
		{"PATCH on a job", "PATCH", "/ojs/v1/jobs/{id}", `{}`, nil, 405, "method_not_allowed"},
		{"GET on fetch", "GET", "/ojs/v1/workers/fetch", "", nil, 405, "method_not_allowed"},
		{"POST on health", "POST", "/ojs/v1/health", `{}`, nil, 405, "method_not_allowed"},
		{"DELETE on queues", "DELETE", "/ojs/v1/queues", "", nil, 405, "method_not_allowed"},

		// Query parameters.
		{"events limit zero", "GET", "/ojs/v1/events?queues={q}&limit=0", "", nil, 400, "invalid_request"},
		{"events limit not a number", "GET", "/ojs/v1/events?queues={q}&limit=ten", "", nil, 400, "invalid_request"},
		{"events limit over 1000", "GET", "/ojs/v1/events?queues={q}&limit=1001", "", nil, 400, "invalid_request"},
		{"events unknown parameter", "GET", "/ojs/v1/events?queues={q}&order=desc", "", nil, 400, "invalid_request"},
		{"events unknown type", "GET", "/ojs/v1/events?queues={q}&types=job.exploded", "", nil, 400, "invalid_request"},
		{"events bad type pattern", "GET", "/ojs/v1/events?queues={q}&types=job*", "", nil, 400, "invalid_request"},
		{"events since in words", "GET", "/ojs/v1/events?queues={q}&since=yesterday", "", nil, 400, "invalid_request"},
		{"events until before since", "GET", "/ojs/v1/events?queues={q}&since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "", nil, 400, "invalid_request"},
		{"events cursor not an event id", "GET", "/ojs/v1/events?queues={q}&after=page2", "", nil, 400, "invalid_request"},
		{"events job and workflow", "GET", "/ojs/v1/events?job_id={id}&workflow_id={id}", "", nil, 400, "invalid_request"},
		{"events 21 queues", "GET", "/ojs/v1/events?queues=" + repeatJoin("{q}", 21), "", nil, 400, "invalid_request"},
		{"events job id of 300 bytes", "GET", "/ojs/v1/events?job_id=" + big(300), "", nil, 400, "invalid_request"},
		// Valid but costly: a query by time reads at most 31 days back.
		{"events since the epoch", "GET", "/ojs/v1/events?queues={q}&since=1970-01-01T00:00:00Z", "", nil, 200, ""},
		{"events cursor from the epoch", "GET", "/ojs/v1/events?queues={q}&after=evt_00000000-0000-7000-8000-000000000000", "", nil, 200, ""},
		{"dead letter limit zero", "GET", "/ojs/v1/dead-letter?queue={q}&limit=0", "", nil, 400, "invalid_request"},
		{"dead letter limit over 100", "GET", "/ojs/v1/dead-letter?queue={q}&limit=101", "", nil, 400, "invalid_request"},
		{"dead letter limit in exponent form", "GET", "/ojs/v1/dead-letter?queue={q}&limit=1e2", "", nil, 400, "invalid_request"},
		{"dead letter invalid queue", "GET", "/ojs/v1/dead-letter?queue=" + url.QueryEscape("Q Q"), "", nil, 400, "invalid_request"},
	}
}

// TestBadInput sends the catalog of malformed and hostile requests, checks
// each answer's status and OJS error code and envelope, then checks that
// none of them left anything behind: no job, event, dead letter entry or
// registered queue on the case's queue, no job or workflow under the
// case's id.
func TestBadInput(t *testing.T) {
	t.Parallel()
	cases := badCatalog()
	if len(cases) < 60 {
		t.Fatalf("the catalog has %d cases", len(cases))
	}
	run := fmt.Sprintf("%x", time.Now().UnixNano()%0xffffff)
	type written struct{ q, id string }
	left := make([]written, len(cases))
	t.Run("catalog", func(t *testing.T) {
		for i, c := range cases {
			q := fmt.Sprintf("bad-%s-%d", run, i)
			id := uuid.Must(uuid.NewV7()).String()
			left[i] = written{q, id}
			sub := strings.NewReplacer("{q}", q, "{id}", id)
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				var body any
				switch c.method {
				case http.MethodPost, http.MethodPut, http.MethodPatch:
					body = sub.Replace(c.body)
				}
				hdr := make([]string, len(c.hdr))
				for k, v := range c.hdr {
					hdr[k] = sub.Replace(v)
				}
				r := do(t, c.method, sub.Replace(c.path), body, hdr...)
				if r.Status != c.status || r.errCode() != c.code {
					t.Fatalf("got %d %q, want %d %q: %.400s", r.Status, r.errCode(), c.status, c.code, r.Raw)
				}
				if w := r.wireCode(); r.Status >= 400 && !bindingCodes[w] && !strings.HasPrefix(w, "x_") {
					t.Fatalf("error code %q is neither in the HTTP binding's table (16.3) nor x_-prefixed: %.400s", w, r.Raw)
				}
				if c.status < 400 {
					return
				}
				e, _ := r.Body["error"].(map[string]any)
				if m, _ := e["message"].(string); m == "" || e["retryable"] != false || e["request_id"] != r.Header.Get("X-Request-Id") {
					t.Fatalf("error envelope: %.400s", r.Raw)
				}
				if r.Header.Get("Content-Type") != "application/openjobspec+json" {
					t.Fatalf("content type %q", r.Header.Get("Content-Type"))
				}
				if c.status == 405 && r.Header.Get("Allow") == "" {
					t.Fatal("405 without Allow")
				}
			})
		}
	})
	// Nothing above may have written anything.
	registered := map[string]bool{}
	for _, x := range do(t, http.MethodGet, "/ojs/v1/queues", nil).Body["queues"].([]any) {
		registered[x.(map[string]any)["name"].(string)] = true
	}
	for i, c := range cases {
		w := left[i]
		if registered[w.q] {
			t.Errorf("%s: queue %s was registered", c.name, w.q)
		}
		st := do(t, http.MethodGet, "/ojs/v1/queues/"+w.q+"/stats", nil)
		qs, _ := st.Body["queue"].(map[string]any)
		for _, k := range []string{"available", "active", "scheduled", "retryable", "discarded", "completed", "failed_last_hour"} {
			if st.Status != 200 || num(qs[k]) != 0 {
				t.Errorf("%s: stats of %s: %d %s", c.name, w.q, st.Status, st.Raw)
				break
			}
		}
		if r := do(t, http.MethodGet, "/ojs/v1/dead-letter?queue="+w.q, nil); r.Status != 200 || len(r.Body["jobs"].([]any)) != 0 {
			t.Errorf("%s: dead letter of %s: %d %.300s", c.name, w.q, r.Status, r.Raw)
		}
		if r := do(t, http.MethodGet, "/ojs/v1/events?queues="+w.q, nil); r.Status != 200 || len(r.Body["events"].([]any)) != 0 {
			t.Errorf("%s: events of %s: %d %.300s", c.name, w.q, r.Status, r.Raw)
		}
		if r := do(t, http.MethodGet, "/ojs/v1/jobs/"+w.id, nil); r.Status != 404 {
			t.Errorf("%s: job %s exists: %d", c.name, w.id, r.Status)
		}
		if strings.Contains(c.path, "workflows") {
			if r := do(t, http.MethodGet, "/ojs/v1/workflows/"+w.id, nil); r.Status != 404 {
				t.Errorf("%s: workflow %s exists: %d", c.name, w.id, r.Status)
			}
		}
	}
}
