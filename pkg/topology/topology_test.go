package topology

import (
	"testing"
	"time"
)

func TestForEnvValid(t *testing.T) {
	t.Parallel()
	for _, name := range Environments {
		e, err := ForEnv(name)
		if err != nil {
			t.Fatalf("ForEnv(%q): %v", name, err)
		}
		if len(e.Queues) == 0 {
			t.Fatalf("%s: no push queues", name)
		}
		for _, q := range e.Queues {
			if q.BatchSize < 1 || q.BatchSize > 10 {
				t.Errorf("%s/%s: batch size %d outside 1..10", name, q.Name, q.BatchSize)
			}
			if q.VisibilityTimeout < 6*e.Functions[FunctionWorker].Timeout {
				t.Errorf("%s/%s: visibility timeout %v below 6x worker timeout", name, q.Name, q.VisibilityTimeout)
			}
			if q.MaxReceiveCount < 1 || q.MaxConcurrency < 2 {
				t.Errorf("%s/%s: bad redrive/concurrency %d/%d", name, q.Name, q.MaxReceiveCount, q.MaxConcurrency)
			}
		}
		for _, fn := range FunctionNames {
			f, ok := e.Functions[fn]
			if !ok || f.MemoryMB < 128 || f.Timeout <= 0 || f.Timeout > 15*time.Minute {
				t.Errorf("%s: function %s badly sized: %+v", name, fn, f)
			}
		}
	}
	if _, err := ForEnv("nope"); err == nil {
		t.Fatal("ForEnv accepted an unknown environment")
	}
}

func TestProdIsProtected(t *testing.T) {
	t.Parallel()
	e, _ := ForEnv("prod")
	if !e.PointInTimeRecovery || !e.DeletionProtection {
		t.Fatal("prod must have point-in-time recovery and deletion protection")
	}
	d, _ := ForEnv("dev")
	if d.DeletionProtection {
		t.Fatal("dev should be destroyable")
	}
}
