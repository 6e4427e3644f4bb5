package store

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/retry"
)

// A job with the default retry policy is stored without it (about 190
// bytes less in every such item) and reads back with it; any other
// policy, and one stored before this, is kept as written.
func TestTheDefaultRetryPolicyIsNotStored(t *testing.T) {
	en, err := job.ParseEnqueue([]byte(`{"type":"r.a","args":[1]}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j := en.Job
	j.ID = "019abcde-1234-7abc-8def-0123456789ab"
	r, err := toRecord(j)
	if err != nil || r.Retry != "" {
		t.Fatalf("default policy stored as %q (%v); want nothing", r.Retry, err)
	}
	back, err := r.toJob()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(back.Retry)
	want, _ := json.Marshal(retry.Default())
	if string(got) != string(want) {
		t.Fatalf("read back as %s, want the default %s", got, want)
	}

	custom, err := job.ParseEnqueue([]byte(`{"type":"r.a","args":[1],"retry":{"max_attempts":7}}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err = toRecord(custom.Job)
	if err != nil || r.Retry == "" {
		t.Fatalf("custom policy stored as %q (%v)", r.Retry, err)
	}
	if back, err = r.toJob(); err != nil || back.Retry.MaxAttempts != 7 {
		t.Fatalf("custom policy read back as %+v (%v)", back.Retry, err)
	}
	r.Retry = defaultRetry // an item written before the default was left out
	if back, err = r.toJob(); err != nil || back.Retry.MaxAttempts != 3 {
		t.Fatalf("stored default read back as %+v (%v)", back.Retry, err)
	}
}

// The job item's attribute names, whatever parts record is made of: a
// regrouping of its fields must not rename or drop one, and every field
// must survive the round trip.
func TestRecordAttributeNames(t *testing.T) {
	want := []string{"args", "attempt", "cancel_requested", "cancelled_at", "ckpt", "ckpt_at", "ckpt_seq", "completed_at", "created_at",
		"deadline_ms", "discarded_at", "dispatch", "due_at", "due_pk", "enqueued_at", "error", "errors",
		"expires_at", "expires_ms", "extra", "fb", "id", "lease_until", "max_attempts", "meta",
		"next_attempt_at", "parent_results", "pk", "priority", "prog", "prog_info", "pruned_at", "push", "queue", "ready_pk",
		"ready_sk", "result", "result_bytes", "result_ttl", "retain_s", "retry", "retry_delay_ms", "rl", "rl_key", "rq", "scheduled_at", "schema", "sk", "started_at", "state",
		"tags", "tenant", "timeout_ms", "tn_pk", "ttl", "type", "uk", "version", "visibility_ms", "wf_ahead", "wf_id", "wf_last",
		"wf_next", "wf_node", "wf_shard", "wf_sid", "wf_ttl", "worker_id"}
	var r record
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				fill(v.Field(i))
			}
		case reflect.String:
			v.SetString("x")
		case reflect.Int, reflect.Int64:
			v.SetInt(7)
		case reflect.Float64:
			v.SetFloat(0.5)
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			fill(v.Index(0))
		default:
			t.Fatalf("cannot fill a %s", v.Type())
		}
	}
	fill(reflect.ValueOf(&r).Elem())
	av, err := attributevalue.MarshalMap(r)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(av))
	if !slices.Equal(got, want) {
		t.Fatalf("attributes\n%q\nwant\n%q", got, want)
	}
	var back record
	if err := attributevalue.UnmarshalMap(av, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("read back as %+v (%v), want %+v", back, err, r)
	}
}
