// Package wfstore owns the stored workflow items and their conditional
// writes: every item of a workflow lives in the partition WF#<id> of the
// single table (its nodes, the counter shards of its wide composites), and
// its root and running nested nodes are listed in the due index (progress
// checks, timeouts). A workflow's creation and advancement write its jobs
// in the same transactions as its nodes, through the table kernel
// (pkg/store), which owns the job items.
package wfstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
	"github.com/ojs-aws/ojs-serverless/pkg/wfstate"
)

// Store reads and writes the workflow items of the kernel's table.
type Store struct {
	// jobs is the kernel: it builds the job items a workflow's writes
	// put (with its process's due index watch) and the shared batch and
	// transaction helpers.
	jobs  *store.Store
	db    store.DynamoAPI
	table string
}

// New returns the workflow items' store on st's table and client.
func New(st *store.Store) *Store {
	return &Store{jobs: st, db: st.DB(), table: st.Table()}
}

// Attribute names of the table the workflow items use.
const (
	attrPK    = "pk"
	attrSK    = "sk"
	attrState = "state"
	attrDuePK = "due_pk"
	attrDueAt = "due_at"
)

// workflowDueKey is the partition of a workflow's due entries under base
// (workflowDuePK or timeoutDuePK).
func workflowDueKey(base, workflowID string) string {
	return store.ShardedKey(base, workflowID, topology.JobTable.Shards.WorkflowDue)
}

// RootIn guards on workflow wfID's root being in one of states (see
// store.Store.ApplyAllIf).
func RootIn(wfID string, states ...wfstate.State) store.Guard {
	values := map[string]types.AttributeValue{}
	var in []string
	for i, st := range states {
		k := ":gs" + strconv.Itoa(i)
		values[k] = store.AttrS(string(st))
		in = append(in, k)
	}
	return store.NewGuard(wfKey(wfID, nodeSK(RootPath)), "#gs IN ("+strings.Join(in, ", ")+")", map[string]string{"#gs": "state"}, values)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }
