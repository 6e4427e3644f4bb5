package awsclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// recorder is an endpoint that answers every request with an empty JSON
// object and remembers who signed what.
type recorder struct {
	mu    sync.Mutex
	auths []string
	srv   *httptest.Server
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auths = append(r.auths, req.Header.Get("Authorization"))
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auths...)
}

func clearEnv(t *testing.T) {
	for _, n := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ACCESS_KEY_ID",
		"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "OJS_CALL_STATS_DIR"} {
		t.Setenv(n, "")
	}
}

// Each service goes to its own AWS_ENDPOINT_URL_<SERVICE>, signed with the
// environment's credentials in its region (as Lambda provides them).
func TestLoadReadsTheLambdaEnvironment(t *testing.T) {
	clearEnv(t)
	db, q := newRecorder(t), newRecorder(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", db.srv.URL)
	t.Setenv("AWS_ENDPOINT_URL_SQS", q.srv.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "token")
	t.Setenv("AWS_REGION", "eu-west-3")
	cfg, err := Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := dynamodb.NewFromConfig(cfg, DynamoDBOptions).ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	sqs.NewFromConfig(cfg).ListQueues(ctx, &sqs.ListQueuesInput{}) // the answer's shape does not matter
	for name, r := range map[string]*recorder{"DynamoDB": db, "SQS": q} {
		got := r.calls()
		if len(got) == 0 {
			t.Fatalf("%s: no request reached its endpoint", name)
		}
		if !strings.Contains(got[0], "Credential=AKIDFROMENV/") || !strings.Contains(got[0], "/eu-west-3/") {
			t.Fatalf("%s: signed %q, want the environment's key in eu-west-3", name, got[0])
		}
	}

	// One AWS_ENDPOINT_URL serves every service (LocalStack); without
	// credentials the local stack's dummy ones sign.
	clearEnv(t)
	all := newRecorder(t)
	t.Setenv("AWS_ENDPOINT_URL", all.srv.URL)
	if cfg, err = Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamodb.NewFromConfig(cfg, DynamoDBOptions).ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	if got := all.calls(); len(got) != 1 || !strings.Contains(got[0], "Credential=local/") || !strings.Contains(got[0], "/us-east-1/") {
		t.Fatalf("requests %q, want one signed by the local credentials in us-east-1", got)
	}
}

// Without credentials and without a local endpoint nothing would sign: Load
// says what is missing instead of failing at the first request.
func TestLoadWithoutCredentialsFails(t *testing.T) {
	clearEnv(t)
	_, err := Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("Load without credentials: %v", err)
	}
}
