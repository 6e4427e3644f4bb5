// Command with-emulators starts DynamoDB Local and the SQS emulator on free
// ports, runs the given command with OJS_TEST_DYNAMODB_ENDPOINT and
// OJS_TEST_SQS_ENDPOINT set (so every test package shares one pair), and
// stops the emulators when the command ends, whatever its outcome.
//
//	go run ./localstack/cmd/with-emulators [-in-memory] -- go test ./...
//
// DynamoDB Local's stream records are indexed (emulator.Options
// IndexStreams), which test packages need: each test creates its own table.
// -in-memory runs DynamoDB Local with -inMemory instead, about 30% faster a
// request for a command whose runs write one table (the e2e suite).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
)

func main() {
	inMemory := flag.Bool("in-memory", false, "run DynamoDB Local -inMemory, unindexed: faster for a command that writes one table")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: with-emulators -- command [args...]")
		os.Exit(2)
	}
	_ = os.MkdirAll(".local/logs", 0o755)
	logf, err := os.Create(filepath.Join(".local", "logs", "test-emulators.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "with-emulators:", err)
		os.Exit(1)
	}
	em, err := emulator.Start(context.Background(), emulator.Options{Log: logf, IndexStreams: !*inMemory})
	if err != nil {
		fmt.Fprintln(os.Stderr, "with-emulators:", err)
		os.Exit(1)
	}
	if !*inMemory && !em.StreamIndexed {
		fmt.Fprintln(os.Stderr, "with-emulators: DynamoDB Local's stream records are not indexed (.local/logs/test-emulators.log says why): tests run slower as their tables accumulate")
	}
	fmt.Fprintf(os.Stderr, "with-emulators: DynamoDB Local at %s, SQS emulator at %s\n", em.DynamoDBEndpoint, em.SQSEndpoint)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), emulator.EnvTestDynamoDB+"="+em.DynamoDBEndpoint, emulator.EnvTestSQS+"="+em.SQSEndpoint)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		if cmd.Process != nil {
			_ = cmd.Process.Signal(s)
		}
	}()
	runErr := cmd.Run()
	em.Stop()
	if runErr != nil {
		if ee, ok := runErr.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "with-emulators:", runErr)
		os.Exit(1)
	}
}
