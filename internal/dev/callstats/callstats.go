// Package callstats counts the AWS requests a process makes, by service and
// operation, with what they are billed by: request bytes, items per
// transaction or batch, DynamoDB read and write units (as the service
// reports them with ReturnConsumedCapacity, or estimated when it does not),
// 64 KB chunks for SQS and EventBridge, and empty receives.
//
// It is opt-in and costs nothing when off: only the functions' development
// builds (build tag ojsdev, package autocount) link it, and they add the
// middleware only when OJS_CALL_STATS_DIR is set. Each process then writes
// its cumulative counts to one file in that directory, which the benchmark
// (make bench) sums before and after each phase.
package callstats

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// EnvDir names the directory the process writes its counts to; unset, no
// middleware is installed.
const EnvDir = "OJS_CALL_STATS_DIR"

// Service ids as the SDK names them.
const (
	DynamoDB        = "DynamoDB"
	DynamoDBStreams = "DynamoDB Streams"
	SQS             = "SQS"
	EventBridge     = "EventBridge"
)

// Op is what was counted for one service operation.
type Op struct {
	Service   string `json:"service"`
	Operation string `json:"operation"`
	// Calls are operation calls (one per SDK call, whatever its retries).
	Calls int64 `json:"calls"`
	// Attempts are HTTP requests sent, retries included: what is billed.
	Attempts int64 `json:"attempts"`
	// Errors are calls that returned an error; ConditionFailed those whose
	// error was a failed condition or a cancelled transaction (DynamoDB
	// still bills their writes).
	Errors          int64 `json:"errors,omitempty"`
	ConditionFailed int64 `json:"condition_failed,omitempty"`
	// RequestBytes is the size of the request bodies sent.
	RequestBytes int64 `json:"request_bytes"`
	// Items are the items of a transaction or batch (DynamoDB), the
	// entries of an SQS batch or the messages received, the EventBridge
	// entries, or the stream records read.
	Items int64 `json:"items,omitempty"`
	// Empty counts receives and stream reads that returned nothing.
	Empty int64 `json:"empty,omitempty"`
	// ReadUnits and WriteUnits are DynamoDB request units: what the
	// service reported (ReturnConsumedCapacity INDEXES, the total), or an estimate for
	// calls that failed (see estimateUnits).
	ReadUnits  float64 `json:"read_units,omitempty"`
	WriteUnits float64 `json:"write_units,omitempty"`
	// Chunks are billing units of 64 KB payload (SQS requests,
	// EventBridge entries).
	Chunks int64 `json:"chunks_64k,omitempty"`
}

func (o *Op) add(p Op, sign int64) {
	f := float64(sign)
	o.Calls += sign * p.Calls
	o.Attempts += sign * p.Attempts
	o.Errors += sign * p.Errors
	o.ConditionFailed += sign * p.ConditionFailed
	o.RequestBytes += sign * p.RequestBytes
	o.Items += sign * p.Items
	o.Empty += sign * p.Empty
	o.ReadUnits += f * p.ReadUnits
	o.WriteUnits += f * p.WriteUnits
	o.Chunks += sign * p.Chunks
}

func (o Op) zero() bool {
	return o.Calls == 0 && o.Attempts == 0 && o.RequestBytes == 0 && o.Items == 0 && o.ReadUnits == 0 && o.WriteUnits == 0
}

// Key is "service operation".
func (o Op) Key() string { return o.Service + " " + o.Operation }

// Snapshot is a process's cumulative counts.
type Snapshot struct {
	// Process names the process (the Lambda function name locally).
	Process string    `json:"process"`
	PID     int       `json:"pid"`
	At      time.Time `json:"at"`
	Ops     []Op      `json:"ops"`
}

// Set is counts by operation key, the unit snapshots are summed and
// subtracted in.
type Set map[string]Op

// Add adds ops to s.
func (s Set) Add(ops []Op) {
	for _, p := range ops {
		o := s[p.Key()]
		o.Service, o.Operation = p.Service, p.Operation
		o.add(p, 1)
		s[p.Key()] = o
	}
}

// Sub returns s minus before, dropping operations left at zero.
func (s Set) Sub(before Set) Set {
	out := Set{}
	for k, o := range s {
		if b, ok := before[k]; ok {
			o.add(b, -1)
		}
		if !o.zero() {
			out[k] = o
		}
	}
	return out
}

// Ops lists the set sorted by service, then operation.
func (s Set) Ops() []Op {
	return sortOps(slices.Collect(maps.Values(s)))
}

func sortOps(ops []Op) []Op {
	slices.SortFunc(ops, func(a, b Op) int { return strings.Compare(a.Key(), b.Key()) })
	return ops
}

// Total sums the operations of one service ("" for all).
func (s Set) Total(service string) Op {
	t := Op{Service: service}
	for _, o := range s {
		if service == "" || o.Service == service {
			t.add(o, 1)
		}
	}
	return t
}

// Recorder counts the requests of the SDK clients it is installed on.
type Recorder struct {
	process string
	mu      sync.Mutex
	ops     map[string]*Op
	changed bool
}

// New returns an empty recorder for the named process.
func New(process string) *Recorder {
	return &Recorder{process: process, ops: map[string]*Op{}}
}

// Snapshot returns the counts so far.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Snapshot{Process: r.process, PID: os.Getpid(), At: time.Now().UTC()}
	for _, o := range r.ops {
		s.Ops = append(s.Ops, *o)
	}
	s.Ops = sortOps(s.Ops)
	return s
}

// Set returns the counts so far as a Set.
func (r *Recorder) Set() Set {
	s := Set{}
	s.Add(r.Snapshot().Ops)
	return s
}

func (r *Recorder) record(service, op string, f func(*Op)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := service + " " + op
	o := r.ops[k]
	if o == nil {
		o = &Op{Service: service, Operation: op}
		r.ops[k] = o
	}
	f(o)
	r.changed = true
}

// AddMiddleware installs the counting middleware on an SDK client's stack:
// pass it in aws.Config.APIOptions or a client's Options.APIOptions.
func (r *Recorder) AddMiddleware(stack *middleware.Stack) error {
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("CallStatsCall", r.handleCall), middleware.After); err != nil {
		return err
	}
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("CallStatsAttempt", r.handleAttempt), middleware.After)
}

// handleCall counts one call: it asks DynamoDB for the consumed capacity
// and reads items, units and empties from the input and output.
func (r *Recorder) handleCall(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	in.Parameters = withCapacity(in.Parameters)
	out, md, err := next.HandleInitialize(ctx, in)
	c := describe(in.Parameters, out.Result, err)
	r.record(service, op, func(o *Op) {
		o.Calls++
		o.Items += c.items
		o.Empty += c.empty
		o.ReadUnits += c.read
		o.WriteUnits += c.write
		if err != nil {
			o.Errors++
			if c.conditionFailed {
				o.ConditionFailed++
			}
		}
	})
	return out, md, err
}

// handleAttempt counts one HTTP attempt and its request bytes once it
// returns, as handleCall counts the call's empties, so that a snapshot never
// holds a receive's chunk without its empty.
func (r *Recorder) handleAttempt(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	var n int64
	if req, ok := in.Request.(*smithyhttp.Request); ok && req.ContentLength > 0 {
		n = req.ContentLength
	}
	out, md, err := next.HandleFinalize(ctx, in)
	r.record(service, op, func(o *Op) {
		o.Attempts++
		o.RequestBytes += n
		if service == SQS {
			o.Chunks += Chunks(n)
		}
	})
	return out, md, err
}

// Chunks is the number of 64 KB billing chunks of a payload of n bytes
// (at least one).
func Chunks(n int64) int64 {
	if n <= 0 {
		return 1
	}
	return (n + 65535) / 65536
}

// withCapacity returns a copy of a DynamoDB input asking for the consumed
// capacity INDEXES (the table's and each index's), other inputs unchanged.
// Not TOTAL: DynamoDB Local's TOTAL for a TransactWriteItems leaves out the
// index writes.
func withCapacity(p any) any {
	mode := reflect.ValueOf(ddbtypes.ReturnConsumedCapacityIndexes)
	if f, ok := field(p, "ReturnConsumedCapacity"); !ok || f.Type() != mode.Type() {
		return p
	}
	c := reflect.New(reflect.TypeOf(p).Elem())
	c.Elem().Set(reflect.ValueOf(p).Elem())
	c.Elem().FieldByName("ReturnConsumedCapacity").Set(mode)
	return c.Interface()
}

type callFacts struct {
	items, empty    int64
	read, write     float64
	conditionFailed bool
}

// describe reads the billing facts of one call from its input and output.
func describe(in, out any, err error) callFacts {
	var c callFacts
	var cc []ddbtypes.ConsumedCapacity
	switch v := in.(type) {
	case *dynamodb.TransactWriteItemsInput:
		c.items = int64(len(v.TransactItems))
	case *dynamodb.TransactGetItemsInput:
		c.items = int64(len(v.TransactItems))
	case *sqs.SendMessageBatchInput, *sqs.DeleteMessageBatchInput, *sqs.ChangeMessageVisibilityBatchInput:
		f, _ := field(v, "Entries") // the batch's entries
		c.items = int64(f.Len())
	case *dynamodb.BatchWriteItemInput:
		for _, reqs := range v.RequestItems {
			c.items += int64(len(reqs))
		}
	case *dynamodb.BatchGetItemInput:
		for _, ka := range v.RequestItems {
			c.items += int64(len(ka.Keys))
		}
	case *eventbridge.PutEventsInput:
		for _, e := range v.Entries {
			n := int64(len(aws.ToString(e.Detail)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Source)))
			c.items += Chunks(n)
		}
	}
	// A DynamoDB output's consumed capacity: one, or one per table.
	if f, ok := field(out, "ConsumedCapacity"); ok {
		switch x := f.Interface().(type) {
		case *ddbtypes.ConsumedCapacity:
			if x != nil {
				cc = []ddbtypes.ConsumedCapacity{*x}
			}
		case []ddbtypes.ConsumedCapacity:
			cc = x
		}
	}
	// An SQS receive's messages, or DynamoDB Streams GetRecords' records:
	// read by reflection so that the functions (which never read streams)
	// do not link its client.
	for _, name := range []string{"Messages", "Records"} {
		if f, ok := field(out, name); ok && f.Kind() == reflect.Slice {
			c.items = int64(f.Len())
			if f.Len() == 0 {
				c.empty = 1
			}
		}
	}
	for _, x := range cc {
		// The total of the table and its indexes, attributed by the kind
		// of request (a write request's units are all write units).
		units := deref(x.CapacityUnits)
		if tx, ok := in.(*dynamodb.TransactWriteItemsInput); ok && x.Table != nil {
			units = txUnits(tx, x)
		}
		if isWrite(in) {
			c.write += units
		} else {
			c.read += units
		}
	}
	if err != nil {
		var ccf *ddbtypes.ConditionalCheckFailedException
		var tce *ddbtypes.TransactionCanceledException
		c.conditionFailed = errors.As(err, &ccf) || errors.As(err, &tce)
		if c.conditionFailed {
			c.read, c.write = estimateUnits(in)
		}
	}
	return c
}

// indexKeys names the partition key attribute of each of the job table's
// global secondary indexes (by index name), for txUnits.
var indexKeys = func() map[string]string {
	m := map[string]string{}
	for _, ix := range topology.JobTable.Indexes {
		m[ix.Name] = ix.PartitionKey.Name
	}
	return m
}()

// txUnits is what a successful transaction's consumed capacity x (one
// table's) costs on DynamoDB: two write units per item and KB, and two per
// index entry written. DynamoDB Local reports two per KB of all the items
// together, so each part counts at least two units per item it holds (an
// index's: the items that put or set its key); what DynamoDB Local reported
// is kept when it is larger.
func txUnits(tx *dynamodb.TransactWriteItemsInput, x ddbtypes.ConsumedCapacity) float64 {
	table := aws.ToString(x.TableName)
	items, byIndex := 0, map[string]int{}
	for _, it := range tx.TransactItems {
		var name *string
		touches := func(attr string) bool { return false }
		switch {
		case it.Put != nil:
			name = it.Put.TableName
			touches = func(attr string) bool { _, ok := it.Put.Item[attr]; return ok }
		case it.Update != nil:
			name = it.Update.TableName
			touches = func(attr string) bool { return updateNames(it.Update, attr) }
		case it.Delete != nil:
			name = it.Delete.TableName
		case it.ConditionCheck != nil:
			name = it.ConditionCheck.TableName
		}
		if table != "" && aws.ToString(name) != table {
			continue
		}
		items++
		for index, key := range indexKeys {
			if touches(key) {
				byIndex[index]++
			}
		}
	}
	total := max(deref(x.Table.CapacityUnits), float64(2*items))
	for index, c := range x.GlobalSecondaryIndexes {
		total += max(deref(c.CapacityUnits), float64(2*byIndex[index]))
	}
	return total
}

// updateNames reports whether an update's SET clause names attr (through
// its expression attribute names, as the store writes every update): a
// SET of an index's key puts or moves the item's entry. A REMOVE is not
// counted: it writes the index only if the item was in it, which the
// request does not tell.
func updateNames(u *ddbtypes.Update, attr string) bool {
	expr := setClause(aws.ToString(u.UpdateExpression))
	for placeholder, name := range u.ExpressionAttributeNames {
		if name == attr && hasToken(expr, placeholder) {
			return true
		}
	}
	return hasToken(expr, attr)
}

// setClauseRe matches an update expression's SET clause: from the SET
// keyword (a whole word, not a #name or :value) to the next clause's keyword
// (REMOVE, ADD, DELETE, as whole words) or the end.
var setClauseRe = regexp.MustCompile(`(?is)(?:^|[^\w#:])SET\b(?:(.*?[^\w#:])(?:REMOVE|ADD|DELETE)\b|(.*))`)

// setClause is the SET clause of an update expression ("" if none).
func setClause(expr string) string {
	if m := setClauseRe.FindStringSubmatch(expr); m != nil {
		return m[1] + m[2]
	}
	return ""
}

// hasToken reports whether tok occurs in expr as a whole name (not the
// start of a longer one: "#n1" in "#n10").
func hasToken(expr, tok string) bool {
	for i := 0; ; {
		j := strings.Index(expr[i:], tok)
		if j < 0 {
			return false
		}
		end := i + j + len(tok)
		if end == len(expr) || !isNameByte(expr[end]) {
			return true
		}
		i = end
	}
}

func isNameByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// estimateUnits estimates what DynamoDB bills for a write that failed its
// condition (no consumed capacity comes back with the error): one write
// unit per item, two per transactional item, and a transaction's condition
// checks count as writes too.
func estimateUnits(in any) (read, write float64) {
	switch v := in.(type) {
	case *dynamodb.TransactWriteItemsInput:
		return 0, 2 * float64(len(v.TransactItems))
	case *dynamodb.PutItemInput, *dynamodb.UpdateItemInput, *dynamodb.DeleteItemInput:
		return 0, 1
	}
	return 0, 0
}

func isWrite(in any) bool {
	switch in.(type) {
	case *dynamodb.PutItemInput, *dynamodb.UpdateItemInput, *dynamodb.DeleteItemInput,
		*dynamodb.BatchWriteItemInput, *dynamodb.TransactWriteItemsInput:
		return true
	}
	return false
}

// field is the named field of the struct v points to; ok is false when v
// is not a pointer to a struct with that field.
func field(v any, name string) (reflect.Value, bool) {
	r := reflect.ValueOf(v)
	if r.Kind() != reflect.Pointer || r.IsNil() || r.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	f := r.Elem().FieldByName(name)
	return f, f.IsValid()
}

func deref(p *float64) float64 {
	if p == nil || math.IsNaN(*p) {
		return 0
	}
	return *p
}

// FileName is the file a process writes its snapshot to.
func FileName(process string, pid int) string {
	return fmt.Sprintf("%s-%d.json", strings.NewReplacer("/", "_", " ", "_").Replace(process), pid)
}

// WriteFile writes the recorder's snapshot to dir atomically (temporary
// file, then rename), so a reader never sees half a file.
func (r *Recorder) WriteFile(dir string) error {
	r.mu.Lock()
	r.changed = false
	r.mu.Unlock()
	s := r.Snapshot()
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	name := filepath.Join(dir, FileName(s.Process, s.PID))
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// Flush writes the snapshot every interval while it changes, until ctx
// ends (then once more).
func (r *Recorder) Flush(ctx context.Context, dir string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = r.WriteFile(dir)
			return
		case <-t.C:
			r.mu.Lock()
			changed := r.changed
			r.mu.Unlock()
			if changed {
				_ = r.WriteFile(dir)
			}
		}
	}
}

// ReadDir sums the snapshots in dir by process name (the part of the file
// name before the pid), so restarted processes add up.
func ReadDir(dir string) (map[string]Set, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string]Set{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s Snapshot
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if out[s.Process] == nil {
			out[s.Process] = Set{}
		}
		out[s.Process].Add(s.Ops)
	}
	return out, nil
}

// FromEnv returns the process-wide recorder when OJS_CALL_STATS_DIR is set
// (creating the directory and starting its flusher on first use), else nil.
// The process is named by AWS_LAMBDA_FUNCTION_NAME, else the executable.
var FromEnv = sync.OnceValue(func() *Recorder {
	dir := os.Getenv(EnvDir)
	if dir == "" || os.MkdirAll(dir, 0o755) != nil {
		return nil
	}
	r := New(cmp.Or(os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), filepath.Base(os.Args[0])))
	go r.Flush(context.Background(), dir, 200*time.Millisecond)
	return r
})
