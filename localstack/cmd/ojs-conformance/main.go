// Command ojs-conformance runs the public OJS conformance suite against the
// offline local stack on free ports, with the reset the suite's runner needs
// between tests (Redis FLUSHDB), prints a table per suite directory and fails
// on any failure not listed as expected.
//
//	go run ./localstack/cmd/ojs-conformance -runner <binary> -suites third_party/ojs-conformance/suites \
//	    -dirs level-0-core,level-1-reliable -expected docs/conformance-expected-failures.txt
//
// Expected failures are tests no server can pass (docs/conformance.md says
// why, one by one); one that starts passing fails the run too, so the list
// stays true.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func main() {
	runner := flag.String("runner", "", "path to the built conformance runner (third_party/ojs-conformance/runner/http)")
	suites := flag.String("suites", "third_party/ojs-conformance/suites", "the suite directories' parent")
	dirs := flag.String("dirs", "level-0-core,level-1-reliable,level-2-scheduled,level-3-workflows,level-4-advanced", "comma-separated suite directories to run")
	expected := flag.String("expected", "", "file listing expected failures: '<test id> <reason>' per line")
	bin := flag.String("bin", ".local/bin", "directory holding <function>/bootstrap binaries (make build-local)")
	logs := flag.String("logs", ".local/logs/conformance", "directory for function and emulator logs")
	flag.Parse()
	if *runner == "" {
		fmt.Fprintln(os.Stderr, "ojs-conformance: -runner is required")
		os.Exit(2)
	}
	code, err := run(*runner, *suites, strings.Split(*dirs, ","), *expected, *bin, *logs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ojs-conformance:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// report is the part of the runner's JSON report read here.
type report struct {
	Results struct {
		Total, Passed, Failed, Skipped, Errored int
	} `json:"results"`
	Failures []struct {
		TestID   string `json:"test_id"`
		Name     string `json:"name"`
		Failures []struct {
			StepID  string `json:"step_id"`
			Message string `json:"message"`
		} `json:"failures"`
	} `json:"failures"`
}

func run(runner, suites string, dirs []string, expectedFile, bin, logs string) (int, error) {
	expected, err := readExpected(expectedFile)
	if err != nil {
		return 1, err
	}
	env, err := topology.ForEnv("local")
	if err != nil {
		return 1, err
	}
	log := slog.New(slog.DiscardHandler)
	rt, _, err := localrt.StartWithEmulators(context.Background(),
		localrt.Config{Env: env, BinDir: bin, APIAddr: "127.0.0.1:0", LogDir: logs, Logger: log}, "emulators.log")
	if err != nil {
		return 1, err
	}
	defer rt.Stop()
	l, err := rt.ListenReset("127.0.0.1:0")
	if err != nil {
		return 1, err
	}
	fmt.Printf("OJS conformance suite against the local stack at %s (reset: FLUSHDB on %s)\n\n", rt.URL(), l.Addr())
	fmt.Printf("%-22s %6s %6s %6s %9s %7s\n", "suite", "total", "pass", "fail", "expected", "time")
	var unexpected, stale, details []string
	seenExpected := map[string]bool{}
	totals := [4]int{}
	for _, dir := range dirs {
		dir = strings.TrimSpace(dir)
		if dir == "" {
			continue
		}
		start := time.Now()
		cmd := exec.Command(runner, "-url", rt.URL(), "-suites", filepath.Join(suites, dir), "-redis", "redis://"+l.Addr().String(), "-output", "json")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		runErr := cmd.Run()
		var r report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			return 1, fmt.Errorf("suite %s: runner output is not a report (%v): %s %s", dir, runErr, truncate(out.String(), 500), truncate(errOut.String(), 500))
		}
		exp := 0
		for _, f := range r.Failures {
			if _, ok := expected[f.TestID]; ok {
				exp++
				seenExpected[f.TestID] = true
				continue
			}
			unexpected = append(unexpected, dir+" "+f.TestID+" "+f.Name)
			for _, a := range f.Failures {
				details = append(details, fmt.Sprintf("  %s [%s] %s", f.TestID, a.StepID, a.Message))
			}
		}
		failed := r.Results.Failed + r.Results.Errored
		fmt.Printf("%-22s %6d %6d %6d %9d %6.0fs\n", dir, r.Results.Total, r.Results.Passed, failed, exp, time.Since(start).Seconds())
		for i, n := range []int{r.Results.Total, r.Results.Passed, failed, exp} {
			totals[i] += n
		}
		for id := range expected {
			if testInDir(filepath.Join(suites, dir), id) && !seenExpected[id] {
				stale = append(stale, id)
			}
		}
	}
	fmt.Printf("%-22s %6d %6d %6d %9d\n\n", "all", totals[0], totals[1], totals[2], totals[3])
	if len(unexpected) > 0 {
		fmt.Println("FAILED (not expected):\n  " + strings.Join(unexpected, "\n  "))
		for _, d := range details {
			fmt.Println(d)
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		fmt.Println("Listed as expected failures but passed (update docs/conformance.md and the list):")
		for _, s := range stale {
			fmt.Println("  " + s + " " + expected[s])
		}
	}
	if len(unexpected) > 0 || len(stale) > 0 {
		return 1, nil
	}
	if totals[3] > 0 {
		fmt.Printf("Every test passed except %d that no server can pass (docs/conformance.md).\n", totals[3])
	} else {
		fmt.Println("Every test passed.")
	}
	return 0, nil
}

// readExpected reads "<test id> <reason>" lines; # starts a comment.
func readExpected(path string) (map[string]string, error) {
	out := map[string]string{}
	if path == "" {
		return out, nil
	}
	b, err := os.ReadFile(path)
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			id, reason, _ := strings.Cut(line, " ")
			out[id] = strings.TrimSpace(reason)
		}
	}
	return out, err
}

// testInDir reports whether a suite directory holds the test id.
func testInDir(dir, id string) bool {
	found := false
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || found || info.IsDir() || !strings.HasSuffix(p, ".json") {
			return nil
		}
		b, _ := os.ReadFile(p)
		found = bytes.Contains(b, []byte(`"`+id+`"`))
		return nil
	})
	return found
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
