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
	add := func(fn, target, bin string) error {
		st, err := os.Stat(bin)
		if err == nil {
			out = append(out, Binary{Function: fn, Target: target, Bytes: st.Size()})
		}
		return err
	}
	for _, fn := range topology.FunctionNames {
		if err := add(fn, runtime.GOOS+"/"+runtime.GOARCH+" (host)", filepath.Join(binDir, fn, "bootstrap")); err != nil {
			return nil, fmt.Errorf("function %s: %w (build it with make build-local)", fn, err)
		}
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
		if err := add(fn, "linux/arm64", bin); err != nil {
			return nil, err
		}
	}
	return out, nil
}
