package fault

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func reset(t *testing.T) {
	t.Cleanup(func() { _ = Configure("", 0, ""); exit = os.Exit })
}

func TestInertWhenUnset(t *testing.T) {
	reset(t)
	if err := Configure("", 1, ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range Points {
		if err := Hit(p); err != nil {
			t.Fatalf("%s fired with no faults configured: %v", p, err)
		}
	}
}

func TestErrorModeAndLog(t *testing.T) {
	reset(t)
	log := filepath.Join(t.TempDir(), "faults.log")
	if err := Configure("engine.after_relay:1,worker.after_ack:0", 7, log); err != nil {
		t.Fatal(err)
	}
	var inj *Injected
	if err := Hit(EngineAfterRelay); !errors.As(err, &inj) || inj.Point != EngineAfterRelay {
		t.Fatalf("want an injected error, got %v", err)
	}
	if err := Hit(WorkerAfterAck); err != nil {
		t.Fatalf("probability 0 fired: %v", err)
	}
	if err := Hit(APIAfterWrite); err != nil {
		t.Fatalf("unconfigured point fired: %v", err)
	}
	counts, err := ReadLog(log)
	if err != nil || counts["engine.after_relay/error"] != 1 || len(counts) != 1 {
		t.Fatalf("log: %v %v", counts, err)
	}
}

func TestCrashModeExits(t *testing.T) {
	reset(t)
	code := -1
	exit = func(c int) { code = c }
	if err := Configure("worker.after_handler:1:crash", 1, ""); err != nil {
		t.Fatal(err)
	}
	_ = Hit(WorkerAfterHandler)
	if code != ExitCode {
		t.Fatalf("exit code %d, want %d", code, ExitCode)
	}
}

func TestProbabilityIsRoughlyHonoured(t *testing.T) {
	reset(t)
	if err := Configure("sweeper.after_send:0.1", 3, ""); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i < 10000; i++ {
		if Hit(SweeperAfterSend) != nil {
			n++
		}
	}
	if n < 800 || n > 1200 {
		t.Fatalf("%d of 10000 at p=0.1", n)
	}
}

func TestBadSpecs(t *testing.T) {
	reset(t)
	for _, s := range []string{"nope:0.1", "engine.after_relay", "engine.after_relay:2", "engine.after_relay:0.1:explode", "engine.after_relay:x"} {
		if err := Configure(s, 0, ""); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
