package localrt

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// A crashed execution environment is replaced, as on Lambda: the
// invocation that crashed it fails with Runtime.ExitError, the next one
// runs in a fresh process; a process that died while idle is replaced
// before the next invocation, which then succeeds (a cold start).
func TestCrashedEnvironmentIsReplaced(t *testing.T) {
	f := startCrashfn(t, &Function{Name: "crashfn", Timeout: 10 * time.Second, Concurrency: 1})
	ctx := context.Background()
	pid := func() int {
		t.Helper()
		p, err := pidOf(ctx, f, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := pid()
	_, err := f.Invoke(ctx, []byte(`{"crash":true}`))
	var fe *FunctionError
	if !errors.As(err, &fe) || fe.Type != "Runtime.ExitError" {
		t.Fatalf("crash: %v", err)
	}
	second := pid()
	if second == first || f.restarts.Load() != 1 {
		t.Fatalf("pids %d, %d; restarts %d", first, second, f.restarts.Load())
	}
	// Killed while idle: the next invocation runs in a fresh process.
	exited := f.all[0].exitedCh()
	_ = syscall.Kill(second, syscall.SIGKILL)
	select { // the runtime notices the exit (no fixed sleep to outlast)
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the killed process's exit was not noticed")
	}
	third := pid()
	if third == second || f.restarts.Load() != 2 {
		t.Fatalf("after an idle crash: pid %d (was %d), restarts %d", third, second, f.restarts.Load())
	}
	// Recycled (the stack's reset): the next invocation runs in a fresh
	// process, the one after it in the same one.
	f.Recycle()
	fourth := pid()
	if fourth == third || pid() != fourth {
		t.Fatalf("after recycle: pids %d, %d", third, fourth)
	}
}

// A function whose every execution environment is busy starts another
// for the next invocation, as Lambda scales out, up to MaxConcurrency;
// past it, invocations wait for one to be free.
func TestBusyFunctionGrowsUpToItsMaxConcurrency(t *testing.T) {
	f := startCrashfn(t, &Function{Name: "crashfn", Timeout: 10 * time.Minute, Concurrency: 1, MaxConcurrency: 2})
	ctx := context.Background()
	first, err := pidOf(ctx, f, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the only environment (the invocation is never waited for; Stop
	// ends it).
	held := make(chan struct{})
	go func() {
		close(held)
		_, _ = pidOf(ctx, f, `{"sleep_ms":600000}`)
	}()
	<-held
	for len(f.idle) > 0 { // until the sleeper has taken the environment
		time.Sleep(5 * time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	second, err := pidOf(wctx, f, `{}`)
	if err != nil {
		t.Fatalf("an invocation while the only environment is busy: %v", err)
	}
	if second == first {
		t.Fatalf("the invocation ran in the busy environment (pid %d)", first)
	}
	// Both held: at MaxConcurrency the next invocation waits instead of
	// starting a third environment.
	go func() { _, _ = pidOf(ctx, f, `{"sleep_ms":600000}`) }()
	for len(f.idle) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	if _, err := pidOf(sctx, f, `{}`); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third invocation at MaxConcurrency 2: %v, want it to wait", err)
	}
	f.mu.Lock()
	n := len(f.all)
	f.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d environments, want 2", n)
	}
}

// An invocation whose caller left goes on, as on Lambda, and keeps its
// execution environment busy until it ends: the next invocation starts
// another environment instead of waiting behind it.
func TestACancelledInvocationKeepsItsEnvironmentBusy(t *testing.T) {
	f := startCrashfn(t, &Function{Name: "crashfn", Timeout: 10 * time.Minute, Concurrency: 1, MaxConcurrency: 2})
	first, err := pidOf(context.Background(), f, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := pidOf(cctx, f, `{"sleep_ms":600000}`); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the caller's deadline: %v", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer wcancel()
	second, err := pidOf(wctx, f, `{}`)
	if err != nil {
		t.Fatalf("the next invocation: %v", err)
	}
	if second == first {
		t.Fatalf("the next invocation ran in the environment still busy with the left one (pid %d)", first)
	}
}
