// Command ojs-bench is the throughput and cost benchmark (make bench): it
// starts the emulators and the local runtime with the real bootstrap
// binaries on free ports, runs jobs, chains and batches in push and pull
// mode, counts every AWS request the functions make (OJS_CALL_STATS_DIR),
// prices them at us-east-1 list prices, measures binary sizes and init
// times, checks the results against the project's targets and writes
// bench/results/latest.{json,md,png}; with -update it also rewrites the
// marked sections of README.md and docs/benchmark.md.
//
// Knobs (environment, or the matching flags): BENCH_JOBS, BENCH_CHAINS,
// BENCH_GRAPHS, BENCH_BATCHES, BENCH_BATCH_WIDTH, BENCH_CLIENTS, BENCH_WORKERS,
// BENCH_FETCH, BENCH_ARGS_BYTES, BENCH_FETCH_WAIT_MS, BENCH_FETCH_BACKOFF_MS, BENCH_CONCURRENCY, BENCH_PACED_JOBS, BENCH_PACED_RATE,
// BENCH_BIG=1 (BENCH_BIG_BATCHES, BENCH_BIG_WIDTH), BENCH_SKIP_ARM64=1.
// It never fails on a missed target: it reports it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/ojs-aws/ojs-serverless/internal/dev/bench"
	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/pkg/wfdef"
)

// env is the number in the environment variable name, else def.
func env[T int | float64](name string, def T) T {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && float64(T(v)) == v {
		return T(v)
	}
	return def
}

func main() {
	var o bench.Options
	s := &o.Settings
	flag.IntVar(&s.Jobs, "jobs", env("BENCH_JOBS", 2000), "jobs per jobs phase (BENCH_JOBS)")
	flag.IntVar(&s.Chains, "chains", env("BENCH_CHAINS", 300), "3-step chains per chains phase (BENCH_CHAINS)")
	flag.IntVar(&s.Graphs, "graphs", env("BENCH_GRAPHS", 225), "4-step diamond graphs per graphs phase (BENCH_GRAPHS)")
	flag.IntVar(&s.Batches, "batches", env("BENCH_BATCHES", 10), "batches per batches phase (BENCH_BATCHES)")
	flag.IntVar(&s.BatchWidth, "batch-width", env("BENCH_BATCH_WIDTH", 100), "jobs per batch (BENCH_BATCH_WIDTH)")
	flag.IntVar(&s.Clients, "clients", env("BENCH_CLIENTS", 16), "concurrent enqueueing clients (BENCH_CLIENTS)")
	flag.IntVar(&s.Workers, "workers", env("BENCH_WORKERS", 8), "pull-mode workers (BENCH_WORKERS)")
	flag.IntVar(&s.FetchCount, "fetch", env("BENCH_FETCH", 10), "jobs per FETCH (BENCH_FETCH)")
	flag.IntVar(&s.FetchBackoffMS, "fetch-backoff", env("BENCH_FETCH_BACKOFF_MS", 50), "the pull workers' longest back-off after an empty FETCH, in ms (BENCH_FETCH_BACKOFF_MS)")
	flag.IntVar(&s.ArgsBytes, "args-bytes", env("BENCH_ARGS_BYTES", 0), "JSON args every measured job carries besides its index, in bytes (BENCH_ARGS_BYTES)")
	flag.IntVar(&s.FetchWaitMS, "fetch-wait", env("BENCH_FETCH_WAIT_MS", 0), "the pull workers' FETCH wait_ms; 0 backs off after an empty FETCH instead (BENCH_FETCH_WAIT_MS)")
	flag.IntVar(&s.Concurrency, "concurrency", env("BENCH_CONCURRENCY", 4), "execution environments of the api and worker functions (BENCH_CONCURRENCY)")
	flag.IntVar(&o.PacedJobs, "paced-jobs", env("BENCH_PACED_JOBS", 300), "jobs of each paced latency phase (a tenth as many chains) (BENCH_PACED_JOBS)")
	flag.Float64Var(&o.PacedRate, "paced-rate", env("BENCH_PACED_RATE", 30.0), "jobs per second of the paced phases (BENCH_PACED_RATE)")
	flag.BoolVar(&o.Big, "big", os.Getenv("BENCH_BIG") == "1", "also run the large batches (BENCH_BIG=1)")
	flag.IntVar(&o.BigWorkflows, "big-batches", env("BENCH_BIG_BATCHES", 10), "large batches (BENCH_BIG_BATCHES)")
	flag.IntVar(&o.BigWidth, "big-width", env("BENCH_BIG_WIDTH", wfdef.MaxJobs), "jobs per large batch (BENCH_BIG_WIDTH)")
	flag.IntVar(&o.CreateWidth, "create-width", env("BENCH_CREATE_WIDTH", wfdef.MaxJobs), "jobs of the group and the batch whose creation is timed; 0 skips it (BENCH_CREATE_WIDTH)")
	flag.BoolVar(&o.SkipArm64, "skip-arm64", os.Getenv("BENCH_SKIP_ARM64") == "1", "skip the linux/arm64 size builds (BENCH_SKIP_ARM64=1)")
	flag.StringVar(&o.BinDir, "bin", ".local/bin", "directory of <function>/bootstrap host builds (make build-local)")
	out := flag.String("out", "bench/results", "results directory")
	update := flag.Bool("update", false, "rewrite the marked sections of README.md and docs/benchmark.md")
	flag.Parse()

	o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	slog.SetDefault(o.Logger)
	loc, err := emulator.FindDir()
	if err != nil {
		fail(err)
	}
	o.RootDir = filepath.Dir(loc)
	o.LogDir = filepath.Join(o.RootDir, ".local", "logs", "bench")
	o.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, o)
	if err != nil {
		fail(err)
	}
	if old, err := os.ReadFile(filepath.Join(*out, "latest.json")); err == nil {
		res.Previous = bench.PreviousOf(old)
	}
	if err := write(res, *out); err != nil {
		fail(err)
	}
	if *update {
		for _, f := range []struct{ path, content string }{
			{filepath.Join(o.RootDir, "README.md"), res.SummaryMarkdown()},
			{filepath.Join(o.RootDir, "docs", "benchmark.md"), res.SummaryMarkdown() + "\n" + res.DetailMarkdown()},
		} {
			if err := updateFile(f.path, f.content); err != nil {
				fail(err)
			}
		}
	}
	fmt.Println(res.SummaryMarkdown())
	fmt.Printf("results: %s/latest.json, latest.md, latest.png; function logs: %s\n", *out, o.LogDir)
}

const (
	beginMarker = "<!-- bench:begin (written by make bench) -->"
	endMarker   = "<!-- bench:end -->"
)

func updateFile(path, content string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, ok := bench.ReplaceBetween(string(b), beginMarker, endMarker, content)
	if !ok {
		return fmt.Errorf("%s has no %q ... %q section", path, beginMarker, endMarker)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

func write(res *bench.Result, dir string) error {
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	var png bytes.Buffer
	title := fmt.Sprintf("ojs-serverless make bench, %s, %d CPUs, local emulators", res.StartedAt.Format("2006-01-02"), res.Machine.CPUs)
	if err := bench.DrawPNG(&png, title, res.Panels()); err != nil {
		return err
	}
	md := "# Latest benchmark run\n\n" + res.SummaryMarkdown() + "\n" + res.DetailMarkdown()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"latest.json": append(js, '\n'), "latest.md": []byte(md), "latest.png": png.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ojs-bench:", err)
	os.Exit(1)
}
