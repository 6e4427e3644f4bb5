package store

import (
	"encoding/json"
	"testing"
	"time"

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
