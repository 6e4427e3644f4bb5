package job_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

func needsOf(t *testing.T, body string) (job.Needs, error) {
	t.Helper()
	e, err := job.ParseEnqueue([]byte(body), time.Now())
	if err != nil {
		return job.Needs{}, err
	}
	return job.NeedsOf(e.Job)
}

// The needs are read from the top-level ext_ml_* attributes and from
// meta.resources and meta.affinity; the top level wins, the rules of both
// apply; a job without them needs nothing and stores nothing.
func TestNeedsOf(t *testing.T) {
	n, err := needsOf(t, `{"type":"ml.train","args":[],"ext_ml_accelerator":"gpu","ext_ml_gpu_type":"nvidia-h100","ext_ml_gpu_count":8,
		"ext_ml_gpu_memory_gb":80,"ext_ml_memory_gb":512,"ext_ml_storage_gb":2000,"ext_ml_cpu_cores":64,"ext_ml_runtime":"pytorch",
		"ext_ml_node_affinity":{"required":[{"key":"zone","operator":"In","values":["a"]}],"preferred":[{"key":"spot","operator":"NotIn","values":["true"],"weight":80}]},
		"meta":{"resources":{"gpu":{"count":2,"type":"nvidia-a100","memory_gb":40},"cpu":{"cores":8}},"affinity":{"required":[{"key":"gpu","operator":"Exists"}]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if n.Accelerator != "gpu" || n.GPUType != "nvidia-h100" || n.GPUCount != 8 || n.GPUMemoryGB != 80 || n.CPUCores != 64 ||
		n.MemoryGB != 512 || n.StorageGB != 2000 || len(n.Required) != 2 || len(n.Preferred) != 1 || n.Preferred[0].Weight != 80 {
		t.Fatalf("needs: %+v", n)
	}
	m, err := needsOf(t, `{"type":"ml.train","args":[],"meta":{"resources":{"gpu":{"count":2,"type":"nvidia-a100","memory_gb":40},"cpu":{"cores":8},"memory_gb":64,"storage_gb":200},
		"affinity":{"preferred":[{"key":"spot","operator":"NotIn","values":["true"]}]}}}`)
	if err != nil || m.GPUCount != 2 || m.GPUType != "nvidia-a100" || m.GPUMemoryGB != 40 || m.CPUCores != 8 || m.MemoryGB != 64 || m.StorageGB != 200 || m.Preferred[0].Weight != 1 {
		t.Fatalf("meta needs: %+v %v", m, err)
	}
	none, err := needsOf(t, `{"type":"t.job","args":[],"meta":{"trace":"resources"},"ext_other":1}`)
	if err != nil || !none.IsZero() {
		t.Fatalf("no needs: %+v %v", none, err)
	}
	e, _ := job.ParseEnqueue([]byte(`{"type":"t.job","args":[]}`), time.Now())
	if s := job.EncodeNeeds(e.Job); s != "" {
		t.Fatalf("a job without needs stores %q", s)
	}
	e, _ = job.ParseEnqueue([]byte(`{"type":"t.job","args":[],"ext_ml_gpu_count":1}`), time.Now())
	if back, err := job.DecodeNeeds(job.EncodeNeeds(e.Job)); err != nil || back.GPUCount != 1 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}

// Needs of the wrong shape are refused at enqueue with the field named.
func TestNeedsRefused(t *testing.T) {
	for _, body := range []string{
		`{"type":"t.job","args":[],"ext_ml_gpu_count":"four"}`,
		`{"type":"t.job","args":[],"ext_ml_gpu_count":1.5}`,
		`{"type":"t.job","args":[],"ext_ml_memory_gb":-1}`,
		`{"type":"t.job","args":[],"ext_ml_node_affinity":{"required":[{"key":"z","operator":"Near","values":["a"]}]}}`,
		`{"type":"t.job","args":[],"ext_ml_node_affinity":{"required":[{"key":"z","operator":"In"}]}}`,
		`{"type":"t.job","args":[],"ext_ml_node_affinity":{"preferred":[{"key":"z","operator":"Exists","weight":101}]}}`,
		`{"type":"t.job","args":[],"ext_ml_node_affinity":[1]}`,
		`{"type":"t.job","args":[],"meta":{"resources":{"gpu":{"count":"x"}}}}`,
		`{"type":"t.job","args":[],"meta":{"resources":"big"}}`,
	} {
		_, err := needsOf(t, body)
		if oe, ok := err.(*ojserr.Error); !ok || oe.Code != ojserr.InvalidRequest {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// A worker fits a job when it offers at least every resource the job
// needs, the accelerator and GPU type it names, and every required rule
// holds for its labels; preferred rules that hold add their weights.
func TestNeedsFit(t *testing.T) {
	caps := func(c, labels string) *job.Capabilities {
		t.Helper()
		var l json.RawMessage
		if labels != "" {
			l = json.RawMessage(labels)
		}
		got, err := job.ParseCapabilities(json.RawMessage(c), l)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a100x4 := caps(`{"gpu":{"count":4,"type":"NVIDIA-A100","memory_gb":80},"cpu":{"cores":32},"memory_gb":256,"storage_gb":500}`, `["zone:us-east-1a","spot:true"]`)
	cpuOnly := caps(`{"cpu":{"cores":8},"memory_gb":32}`, `{"zone":"us-east-1b"}`)
	tpu := caps(`{"accelerator":"tpu"}`, "")
	for _, tc := range []struct {
		needs  string
		worker *job.Capabilities
		fits   bool
		score  int
	}{
		{`{}`, cpuOnly, true, 0},
		{`{"acc":"gpu"}`, a100x4, true, 0},
		{`{"acc":"gpu"}`, cpuOnly, false, 0},
		{`{"acc":"tpu"}`, tpu, true, 0},
		{`{"acc":"tpu"}`, a100x4, false, 0},
		{`{"gpu":4,"gpu_type":"nvidia-a100","gpu_mem":80}`, a100x4, true, 0},
		{`{"gpu":5}`, a100x4, false, 0},
		{`{"gpu_type":"nvidia-h100"}`, a100x4, false, 0},
		{`{"gpu_mem":81}`, a100x4, false, 0},
		{`{"cpu":9}`, cpuOnly, false, 0},
		{`{"mem":32,"cpu":8}`, cpuOnly, true, 0},
		{`{"disk":1}`, cpuOnly, false, 0},
		{`{"req":[{"key":"zone","operator":"In","values":["us-east-1a"]}]}`, a100x4, true, 0},
		{`{"req":[{"key":"zone","operator":"In","values":["us-east-1a"]}]}`, cpuOnly, false, 0},
		{`{"req":[{"key":"spot","operator":"NotIn","values":["true"]}]}`, a100x4, false, 0},
		{`{"req":[{"key":"spot","operator":"NotIn","values":["true"]}]}`, cpuOnly, true, 0},
		{`{"req":[{"key":"spot","operator":"Exists"}]}`, cpuOnly, false, 0},
		{`{"req":[{"key":"spot","operator":"DoesNotExist"}]}`, cpuOnly, true, 0},
		{`{"pref":[{"key":"zone","operator":"In","values":["us-east-1a"],"weight":80},{"key":"spot","operator":"Exists","weight":5}]}`, a100x4, true, 85},
		{`{"pref":[{"key":"zone","operator":"In","values":["us-east-1a"],"weight":80}]}`, cpuOnly, true, 0},
	} {
		n, err := job.DecodeNeeds(tc.needs)
		if err != nil {
			t.Fatal(err)
		}
		if fits, score := n.Fit(tc.worker); fits != tc.fits || score != tc.score {
			t.Errorf("%s on %+v: fits %v score %d, want %v %d", tc.needs, tc.worker, fits, score, tc.fits, tc.score)
		}
	}
	if c, err := job.ParseCapabilities(nil, json.RawMessage("null")); c != nil || err != nil {
		t.Fatalf("a FETCH without capabilities states none: %+v %v", c, err)
	}
	for _, bad := range [][2]string{{`{"gpu":{"count":"many"}}`, ""}, {`[]`, ""}, {`{}`, `[1]`}} {
		var l json.RawMessage
		if bad[1] != "" {
			l = json.RawMessage(bad[1])
		}
		if _, err := job.ParseCapabilities(json.RawMessage(bad[0]), l); err == nil {
			t.Errorf("capabilities %s labels %s accepted", bad[0], bad[1])
		}
	}
}
