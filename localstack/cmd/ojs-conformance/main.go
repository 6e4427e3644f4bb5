// Command ojs-conformance runs directories of the public OJS conformance
// suite against a local stack it starts on free ports (emulators, the real
// bootstrap binaries, the local runtime, and the FLUSHDB reset listener
// the runner needs), prints a table and exits 1 if any test failed.
//
//	go run ./localstack/cmd/ojs-conformance -suites ext-admin-api,ext-dead-letter,ext-observability
//
// -url runs against a stack already running instead (-redis then names its
// reset address). -patch=false builds the stored runner unchanged (see
// pkg/conformance for what the patch adds).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/conformance"
	"github.com/ojs-aws/ojs-serverless/pkg/emulator"
	"github.com/ojs-aws/ojs-serverless/pkg/localrt"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func main() {
	dir := flag.String("dir", "../shared/ojs-conformance", "the conformance suite copy (runner and suites/)")
	suites := flag.String("suites", "ext-admin-api,ext-dead-letter,ext-observability", "comma-separated suite directories under <dir>/suites")
	url := flag.String("url", "", "run against this server instead of starting a local stack")
	redis := flag.String("redis", "", "with -url: the server's FLUSHDB reset address (host:port)")
	bin := flag.String("bin", "", "directory with <function>/bootstrap binaries (default: build them into a temporary directory)")
	patch := flag.Bool("patch", true, "build the runner with capture and bare $type/$gte support (pkg/conformance)")
	flag.Parse()
	if err := run(*dir, strings.Split(*suites, ","), *url, *redis, *bin, *patch); err != nil {
		fmt.Fprintln(os.Stderr, "ojs-conformance:", err)
		os.Exit(1)
	}
}

func run(dir string, suites []string, url, redis, bin string, patch bool) error {
	ctx := context.Background()
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "runner", "http")); err != nil {
		return fmt.Errorf("no conformance runner under %s (pass -dir)", dir)
	}
	tmp, err := os.MkdirTemp("", "ojs-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	runner := filepath.Join(tmp, "runner")
	fmt.Println("Building the conformance runner ...")
	if err := conformance.Build(ctx, conformance.Options{Dir: dir, Out: runner, Patch: patch}); err != nil {
		return err
	}
	if url == "" {
		stop, u, r, err := startStack(ctx, tmp, bin)
		if err != nil {
			return err
		}
		defer stop()
		url, redis = u, r
	}
	if redis == "" {
		return fmt.Errorf("-redis is required with -url: the runner resets the server before each test")
	}
	var results []conformance.Result
	for _, s := range suites {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		fmt.Printf("\n=== %s\n", s)
		r, err := conformance.Run(ctx, runner, filepath.Join(dir, "suites", s), url, redis, os.Stdout)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	fmt.Printf("\n%s", conformance.Table(results))
	for _, r := range results {
		if !r.OK() {
			return fmt.Errorf("suite %s: %d of %d tests did not pass", r.Suite, r.Total-r.Passed, r.Total)
		}
	}
	fmt.Println("every test passed")
	return nil
}

// startStack starts the emulators, the functions and the reset listener on
// free ports and returns how to stop them.
func startStack(ctx context.Context, tmp, bin string) (func(), string, string, error) {
	if bin == "" {
		bin = filepath.Join(tmp, "bin")
		fmt.Println("Building the functions ...")
		for _, fn := range topology.FunctionNames {
			cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", filepath.Join(bin, fn, "bootstrap"), "./functions/"+fn)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, "", "", fmt.Errorf("build %s: %v\n%s", fn, err, out)
			}
		}
	}
	fmt.Println("Starting the emulators and the local runtime ...")
	em, err := emulator.Start(ctx, emulator.Options{})
	if err != nil {
		return nil, "", "", err
	}
	for _, kv := range em.Env() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	cfg, err := awsclient.Load(ctx)
	if err != nil {
		em.Stop()
		return nil, "", "", err
	}
	env, err := topology.ForEnv("local")
	if err != nil {
		em.Stop()
		return nil, "", "", err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	logs := filepath.Join(tmp, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		em.Stop()
		return nil, "", "", err
	}
	rt, err := localrt.Start(ctx, localrt.Config{Env: env, AWS: cfg, AWSEnv: em.Env(), BinDir: bin, APIAddr: "127.0.0.1:0",
		Table: fmt.Sprintf("conformance-%d", os.Getpid()), LogDir: logs, Logger: quiet})
	if err != nil {
		em.Stop()
		return nil, "", "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rt.Stop()
		em.Stop()
		return nil, "", "", err
	}
	go func() {
		_ = localrt.ServeReset(l, func(ctx context.Context) error { _, err := rt.Reset(ctx); return err }, quiet)
	}()
	fmt.Printf("Local stack at %s, reset at %s\n", rt.URL(), l.Addr())
	return func() { l.Close(); rt.Stop(); em.Stop() }, rt.URL(), l.Addr().String(), nil
}
