package topology

// IndexKey is one key attribute of the table or of an index.
type IndexKey struct {
	Name string
	// Type is the DynamoDB scalar type: "S" or "N".
	Type string
}

// Index is a global secondary index.
type Index struct {
	Name         string
	PartitionKey IndexKey
	SortKey      IndexKey
	// KeysOnly projects only the table's and the index's keys (the index
	// is counted or listed, never read for the items).
	KeysOnly bool
	// Include, when set, projects these attributes besides the keys (and
	// nothing else); with neither set every attribute is projected. An
	// index write costs a write unit per KB of what it projects.
	Include []string
}

// Table describes the single DynamoDB table. The data model is documented in
// docs/data-model.md.
type Table struct {
	PartitionKey IndexKey
	SortKey      IndexKey
	// TTLAttribute holds an epoch-seconds expiry (events, finished items).
	TTLAttribute string
	Indexes      []Index
	// Shards spreads the busiest index partitions over several keys.
	Shards Shards
}

// Shards is how many keys each hot partition is spread over. DynamoDB
// gives one partition key about 1,000 write units a second (an index's
// too), so a queue's partition is sharded in proportion to how often one
// job writes it: ready twice (a pull-mode job: available, then claimed),
// due up to four times (a push-mode job's redelivery check, rewritten by
// the claim or moved to its lease's end, then removed). Shard 0 keeps the key used before sharding. The counts
// are fixed for a table's life: readers read every shard of the count
// they were built with (docs/data-model.md, "Hot keys").
type Shards struct {
	// Ready spreads each queue's available pull-mode jobs (avail#<queue>)
	// by job id.
	Ready int
	// Due spreads each queue's due entries (due#<queue>) by job id.
	Due int
	// Registry spreads the queue registry (QUEUES) by queue name.
	Registry int
	// WorkflowDue spreads running workflows' progress checks (wfdue) and
	// nested timeouts (wftimeout) by workflow id.
	WorkflowDue int
}

// Index names.
const (
	// IndexReady is the sparse index of available pull-mode jobs per queue
	// (FETCH's order: priority, highest first, then enqueue time, oldest
	// first), and of discarded jobs (dead#<queue>). A push-mode job is not
	// in it: SQS holds its place in line, and its redelivery check in
	// IndexDue finds it.
	IndexReady = "ready"
	// IndexDue is the sparse index of jobs waiting for a time per queue:
	// scheduled and retryable jobs (due to become available), active jobs
	// (lease expiry) and available push-mode jobs (redelivery check).
	IndexDue = "due"
	// IndexDone lists completed jobs per queue by completion time
	// (the queue name, <completed ms>#<id>), keys only: queue stats count
	// completions from it right after the ACK that made them.
	IndexDone = "done"
)

// JobIndexAttributes are the job attributes the ready and due indexes
// project: what FETCH needs to choose and claim a job (its answer comes
// from the claim itself), what the sweeper needs to promote, requeue and
// re-send, and what the Admin API's listings and counts show. A job's
// payloads (args, meta, result, the error history, parent_results, tags,
// extra) are not projected: readers that need them read the job by key,
// and "fb" tells FETCH the size of its answer without them.
var JobIndexAttributes = []string{
	"id", "type", "queue", "state", "priority", "attempt", "max_attempts", "version", "retry",
	"timeout_ms", "visibility_ms", "expires_at", "expires_ms", "scheduled_at", "created_at", "enqueued_at",
	"started_at", "completed_at", "cancelled_at", "discarded_at", "next_attempt_at", "push", "worker_id",
	"dispatch", "error", "wf_id", "fb", "pruned_at", "lease_until", "deadline_ms",
}

// DueOtherAttributes are what the due index's other readers use: the
// worker registry (due_pk "workers") and due workflow nodes (wf_id, path).
var DueOtherAttributes = []string{
	"directive", "hostname", "queues", "active_jobs", "concurrency", "last_heartbeat_at", "first_seen_at", "path",
}

// JobTable is the table every environment uses.
var JobTable = Table{
	PartitionKey: IndexKey{Name: "pk", Type: "S"},
	SortKey:      IndexKey{Name: "sk", Type: "S"},
	TTLAttribute: "ttl",
	Indexes: []Index{
		{Name: IndexReady, PartitionKey: IndexKey{Name: "ready_pk", Type: "S"}, SortKey: IndexKey{Name: "ready_sk", Type: "S"},
			Include: JobIndexAttributes},
		{Name: IndexDue, PartitionKey: IndexKey{Name: "due_pk", Type: "S"}, SortKey: IndexKey{Name: "due_at", Type: "N"},
			Include: append(append([]string{}, JobIndexAttributes...), DueOtherAttributes...)},
		{Name: IndexDone, PartitionKey: IndexKey{Name: "done_pk", Type: "S"}, SortKey: IndexKey{Name: "done_sk", Type: "S"}, KeysOnly: true},
	},
	Shards: Shards{Ready: 2, Due: 4, Registry: 4, WorkflowDue: 4},
}

// IndexNames are the names of t's global secondary indexes.
func (t Table) IndexNames() []string {
	names := make([]string, len(t.Indexes))
	for i, ix := range t.Indexes {
		names[i] = ix.Name
	}
	return names
}
