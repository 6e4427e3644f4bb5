package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// MeasureInit starts the bootstrap binary runs times, one at a time,
// against a stub Lambda Runtime API and returns each init duration: from
// the process start to its first "next" request, which a function makes
// once its cold start (configuration, clients) is done. env is the
// function's environment (it must let the function load its config).
func MeasureInit(ctx context.Context, binary string, env []string, runs int) ([]time.Duration, error) {
	nexts := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/2018-06-01/runtime/invocation/next" {
			select {
			case nexts <- time.Now():
			default:
			}
			<-r.Context().Done() // no invocation: the process is killed
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	var out []time.Duration
	for range runs {
		cmd := exec.Command(binary)
		cmd.Env = append(append(os.Environ(), env...), "AWS_LAMBDA_RUNTIME_API="+srv.Listener.Addr().String(),
			"AWS_LAMBDA_FUNCTION_NAME=bench-init", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512", "_HANDLER=bootstrap")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		var err error
		select {
		case at := <-nexts:
			out = append(out, at.Sub(start))
		case <-time.After(10 * time.Second):
			err = fmt.Errorf("%s made no Runtime API request within 10 s", binary)
		case <-ctx.Done():
			err = ctx.Err()
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
