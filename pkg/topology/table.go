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
	// KeysOnly projects only the keys; Include, when set, projects these
	// attributes besides them. With neither, every attribute is projected.
	KeysOnly bool
	Include  []string
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

// Shards is how many keys each hot partition is spread over (one key takes
// about 1,000 write units a second), fixed for a table's life; shard 0
// keeps the key used before sharding (docs/data-model.md, "Hot keys").
// Ready and Due spread each queue's avail#/due# entries by job id,
// Registry the queue registry by queue name, WorkflowDue the workflows'
// progress checks and timeouts by workflow id.
type Shards struct {
	Ready, Due, Registry, WorkflowDue int
}

// Index names.
const (
	// IndexReady is the sparse index of available pull-mode jobs per queue
	// in FETCH's order, and of discarded jobs (dead#<queue>).
	IndexReady = "ready"
	// IndexDue is the sparse index of jobs waiting for a time per queue:
	// scheduled, retryable, active (lease) and available push-mode jobs.
	IndexDue = "due"
	// IndexDone lists completed jobs per queue by completion time, keys
	// only (queue stats).
	IndexDone = "done"
	// IndexTenant is the sparse index of a tenant's available pull-mode
	// jobs per queue in FETCH's order (tn_pk <tenant>~<queue>#<shard>,
	// ready_sk): a tenant-scoped FETCH reads its own jobs only
	// (docs/multi-tenancy.md). Jobs without a tenant have no entry.
	IndexTenant = "tenant"
)

// JobIndexAttributes are the job attributes the ready and due indexes
// project: what FETCH, the sweeper and the Admin API's listings need. A
// job's payloads are not: readers that need them read the job by key.
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
		{Name: IndexTenant, PartitionKey: IndexKey{Name: "tn_pk", Type: "S"}, SortKey: IndexKey{Name: "ready_sk", Type: "S"},
			Include: JobIndexAttributes},
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
