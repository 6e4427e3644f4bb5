// Package e2e tests the product end to end over HTTP. By default it starts
// the offline stack itself (emulators, the four functions' bootstrap
// binaries built for this machine, the local runtime on a free port). With
// OJS_BASE_URL set it runs against that deployment instead (LocalStack or a
// real stage; OJS_AUTH_TOKEN adds a bearer token, OJS_PUSH_QUEUE names the
// push-mode queue, default "lambda"). Requests to an API Gateway
// execute-api URL are signed with SigV4 (IAM authorisation, the stack's
// default) using the standard AWS credential chain and the URL's region,
// unless OJS_AUTH_TOKEN is set (a JWT stage); OJS_SIGV4=1 signs for any
// URL (a custom domain, with AWS_REGION), OJS_SIGV4=0 never.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
	"github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
	"github.com/ojs-aws/ojs-serverless/internal/dev/sigv4"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

var (
	baseURL   string
	authToken string
	pushQueue = "lambda"
	// rt is the local runtime (nil against a remote deployment), started
	// with rtConfig.
	rt       *localrt.Runtime
	rtConfig localrt.Config
	// client sends every request of the suite (SigV4-signing against an
	// IAM-authorised stage).
	client = http.DefaultClient
	// signed is true when client signs with SigV4.
	signed bool
	// logDir holds the local functions' logs, <function>.log ("" against a
	// remote deployment).
	logDir string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if q := os.Getenv("OJS_PUSH_QUEUE"); q != "" {
		pushQueue = q
	}
	authToken = os.Getenv("OJS_AUTH_TOKEN")
	if u := os.Getenv("OJS_BASE_URL"); u != "" {
		baseURL = u
		if err := remoteClient(context.Background(), u, os.Getenv("OJS_SIGV4")); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		return m.Run()
	}
	ctx := context.Background()
	em, stop, err := emulators(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer stop()
	bin, err := os.MkdirTemp("", "ojs-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(bin)
	if err := buildFunctions(bin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	for _, kv := range em {
		k, v, _ := cut(kv)
		os.Setenv(k, v)
	}
	cfg, err := awsclient.Load(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	env, _ := topology.ForEnv("local")
	logDir, _ = os.MkdirTemp("", "ojs-e2e-logs-")
	// The runtime's own log (failed invocations, timeouts, restarts).
	rtLog, err := os.Create(filepath.Join(logDir, "runtime.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer rtLog.Close()
	rtConfig = localrt.Config{Env: env, AWS: cfg, AWSEnv: em, BinDir: bin, APIAddr: "127.0.0.1:0",
		Table: fmt.Sprintf("e2e-%d", os.Getpid()), LogDir: logDir, Logger: slog.New(slog.NewTextHandler(rtLog, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// Every stream record is delivered twice: relays, workflow steps and
		// callbacks must still happen exactly once.
		DuplicateStreamRecords: true}
	rt, err = localrt.Start(ctx, rtConfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer rt.Stop()
	baseURL = rt.URL()
	code := m.Run()
	if code != 0 {
		if b, _ := os.ReadFile(filepath.Join(logDir, "runtime.log")); len(b) > 0 {
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			fmt.Fprintf(os.Stderr, "--- local runtime warnings and errors ---\n%s\n", b)
		}
		for _, fn := range topology.FunctionNames {
			b, _ := os.ReadFile(filepath.Join(logDir, fn+".log"))
			// Every error line first (the tail rarely holds the one that
			// made a request fail), then the tail.
			var errs []string
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, `"level":"ERROR"`) || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
					errs = append(errs, line)
				}
			}
			if len(errs) > 20 {
				errs = errs[len(errs)-20:]
			}
			fmt.Fprintf(os.Stderr, "--- errors in %s.log (last 20) ---\n%s\n", fn, strings.Join(errs, "\n"))
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			fmt.Fprintf(os.Stderr, "--- tail of %s.log ---\n%s\n", fn, b)
		}
	}
	os.RemoveAll(logDir)
	return code
}

// emulators reuses the pair `make test` started, or starts one.
func emulators(ctx context.Context) ([]string, func(), error) {
	d, s := os.Getenv(emulator.EnvTestDynamoDB), os.Getenv(emulator.EnvTestSQS)
	if d != "" && s != "" {
		return []string{"AWS_ENDPOINT_URL_DYNAMODB=" + d, "AWS_ENDPOINT_URL_DYNAMODB_STREAMS=" + d, "AWS_ENDPOINT_URL_SQS=" + s,
			"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_REGION=us-east-1"}, func() {}, nil
	}
	em, err := emulator.Start(ctx, emulator.Options{})
	if err != nil {
		return nil, nil, err
	}
	return em.Env(), em.Stop, nil
}

func buildFunctions(dir string) error {
	for _, fn := range topology.FunctionNames {
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", filepath.Join(dir, fn, "bootstrap"), "../functions/"+fn)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", fn, err, out)
		}
	}
	return nil
}

func cut(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// remoteClient makes the suite sign its requests to a deployed stage when
// sigv4.Enabled says so (setting is OJS_SIGV4).
func remoteClient(ctx context.Context, url, setting string) error {
	sign, err := sigv4.Enabled(url, setting)
	if err != nil || !sign {
		return err
	}
	if authToken != "" {
		if setting == "" {
			return nil // a bearer (JWT) token authorises instead
		}
		return fmt.Errorf("OJS_SIGV4=%s and OJS_AUTH_TOKEN both set: both use the Authorization header", setting)
	}
	tr, err := sigv4.NewTransport(ctx, url)
	if err != nil {
		return err
	}
	client = &http.Client{Transport: tr}
	signed = true
	fmt.Fprintf(os.Stderr, "e2e: signing requests with SigV4 (%s, %s)\n", sigv4.Service, tr.Region)
	return nil
}
