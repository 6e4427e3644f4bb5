package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/ctxsleep"
	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
)

// MeasureInit starts the bootstrap binary runs times, one at a time, as a
// local execution environment that is never invoked, and returns each init
// duration: from the process start to its first Runtime API "next" request,
// which a function makes once its cold start (configuration, clients) is
// done. env is the function's environment (it must let the function load
// its config).
func MeasureInit(ctx context.Context, binary string, env []string, runs int) ([]time.Duration, error) {
	var out []time.Duration
	for range runs {
		fn := &localrt.Function{Name: "bench-init", Binary: binary, Env: env, Logger: slog.New(slog.DiscardHandler)}
		if err := fn.Start(); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(fn.InitTimes()) == 0 && time.Now().Before(deadline) && ctxsleep.Sleep(ctx, time.Millisecond) {
		}
		fn.Stop()
		switch ds := fn.InitTimes(); {
		case len(ds) > 0:
			out = append(out, ds[0])
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			return nil, fmt.Errorf("%s made no Runtime API request within 10 s", binary)
		}
	}
	return out, nil
}
