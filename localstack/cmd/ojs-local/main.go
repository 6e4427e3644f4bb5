// Command ojs-local runs the whole product offline: DynamoDB Local and the
// SQS emulator on free ports, the four functions' bootstrap binaries behind
// a local Lambda Runtime API, and the OJS API on http://localhost:8080.
// With -demo it enqueues demo jobs through the API and reports what
// happened. Ctrl-C stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address the OJS API listens on")
	bin := flag.String("bin", ".local/bin", "directory holding <function>/bootstrap binaries (make build-local)")
	logs := flag.String("logs", ".local/logs", "directory for function and emulator logs")
	envName := flag.String("env", "local", "topology environment to run")
	demo := flag.String("demo", "", `"jobs": enqueue demo jobs through the API and report what happened; "etl": run the ETL workflow example step by step`)
	token := flag.String("token", os.Getenv(topology.EnvAuthToken), "require this bearer token on every API route")
	tokens := flag.String("tokens", os.Getenv(topology.EnvAuthTokens),
		`bearer tokens per permission level, "producer:<token>,worker:<token>,admin:<token>": a route answers 403 to a level that does not allow it, as a JWT stage's scopes (docs/security.md)`)
	resetAddr := flag.String("reset-addr", os.Getenv("OJS_DEV_RESET_ADDR"),
		`development only: answer Redis FLUSHDB on this address (e.g. 127.0.0.1:6379) by wiping the table and queues, for test runners that reset state between tests (the OJS conformance runner's -redis)`)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(*addr, *bin, *logs, *envName, *token, *tokens, *demo, *resetAddr, log); err != nil {
		fmt.Fprintln(os.Stderr, "ojs-local:", err)
		os.Exit(1)
	}
}

func run(addr, bin, logs, envName, token, tokens, demo, resetAddr string, log *slog.Logger) error {
	env, err := topology.ForEnv(envName)
	if err != nil {
		return err
	}
	if _, err := httpapi.ParseTokens(tokens); err != nil {
		return err
	}
	runDemo, ok := map[string]func(string, string) error{"jobs": runJobsDemo, "etl": runETLDemo, "": nil}[demo]
	if !ok {
		return fmt.Errorf("unknown -demo %q (want jobs or etl)", demo)
	}
	fmt.Println("Starting DynamoDB Local and the SQS emulator ...")
	var extra []string
	if token != "" {
		extra = append(extra, topology.EnvAuthToken+"="+token)
	}
	if tokens != "" {
		extra = append(extra, topology.EnvAuthTokens+"="+tokens)
	}
	rt, em, err := localrt.StartWithEmulators(context.Background(),
		localrt.Config{Env: env, BinDir: bin, APIAddr: addr, LogDir: logs, ExtraEnv: extra, Logger: log}, "emulators.log")
	if err != nil {
		return err
	}
	defer rt.Stop()
	if resetAddr != "" {
		if l, err := rt.ListenReset(resetAddr); err != nil {
			// Best effort: the stack serves without it (e.g. a Redis already
			// holds the port).
			fmt.Printf("\nReset listener not started on %s: %v\n", resetAddr, err)
		} else {
			fmt.Printf("\nReset (dev only): Redis FLUSHDB on %s wipes the table and the queues\n", l.Addr())
		}
	}
	fmt.Printf("\nOJS API:        %s/ojs/v1  (manifest: %s/ojs/manifest)\n", rt.URL(), rt.URL())
	fmt.Printf("Web console:    %s/ojs/admin/\n", rt.URL())
	fmt.Printf("DynamoDB Local: %s  table %s\n", em.DynamoDBEndpoint, rt.Table())
	fmt.Printf("SQS emulator:   %s  push-mode queues %v\n", em.SQSEndpoint, rt.QueueURLs())
	fmt.Printf("Function logs:  %s/{api,worker,stream,sweeper}.log\n\n", logs)
	if runDemo != nil {
		if err := runDemo(rt.URL(), token); err != nil {
			fmt.Println("demo failed:", err)
		}
	}
	printHelp(rt.URL(), token)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	fmt.Println("\nStopping the local stack ...")
	done := make(chan struct{})
	go func() { rt.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return nil
}
