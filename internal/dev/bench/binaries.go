package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// Binaries reports the function binaries' sizes: the host builds in
// binDir (make build-local) and, with arm64, linux/arm64 builds made as
// make build makes them (CGO off, -tags lambda.norpc -trimpath
// -ldflags="-s -w") in a temporary directory under rootDir's module.
func Binaries(ctx context.Context, rootDir, binDir string, arm64 bool) ([]Binary, error) {
	var out []Binary
	host := runtime.GOOS + "/" + runtime.GOARCH + " (host)"
	for _, fn := range topology.FunctionNames {
		st, err := os.Stat(filepath.Join(binDir, fn, "bootstrap"))
		if err != nil {
			return nil, fmt.Errorf("function %s: %w (build it with make build-local)", fn, err)
		}
		out = append(out, Binary{Function: fn, Target: host, Bytes: st.Size()})
	}
	if !arm64 {
		return out, nil
	}
	tmp, err := os.MkdirTemp("", "ojs-bench-arm64-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, fn := range topology.FunctionNames {
		bin := filepath.Join(tmp, fn, "bootstrap")
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", bin, "./functions/"+fn)
		cmd.Dir = rootDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build %s for linux/arm64: %v\n%s", fn, err, b)
		}
		st, err := os.Stat(bin)
		if err != nil {
			return nil, err
		}
		out = append(out, Binary{Function: fn, Target: "linux/arm64", Bytes: st.Size()})
	}
	return out, nil
}
