package sigv4

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

const (
	testKey    = "AKIDEXAMPLE"
	testSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	testRegion = "eu-west-1"
)

// verifier is a stand-in for API Gateway's IAM authorizer: it recomputes
// each request's signature with the same SDK signer from the headers the
// request says it signed, the body it received and the secret of the
// access key it names, and answers 403 unless the Authorization headers
// match. It checks what the stage would: the key, scope (region and
// service), the signed headers, the body hash and the signature.
type verifier struct {
	t       *testing.T
	secrets map[string]string // access key id -> secret
	tokens  map[string]string // access key id -> session token, if any
	region  string
	now     time.Time
}

func (v *verifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reason := v.verify(r)
	if reason != "" {
		http.Error(w, reason, http.StatusForbidden)
		return
	}
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "verified")
}

func (v *verifier) verify(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	const algo = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(auth, algo) {
		return "missing signature"
	}
	fields := map[string]string{}
	for _, part := range strings.Split(strings.TrimPrefix(auth, algo), ", ") {
		k, val, _ := strings.Cut(part, "=")
		fields[k] = val
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 {
		return "bad credential scope"
	}
	key, region, service := scope[0], scope[2], scope[3]
	secret, ok := v.secrets[key]
	if !ok {
		return "unknown key"
	}
	if region != v.region || service != Service {
		return "wrong scope " + region + "/" + service
	}
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || when.Sub(v.now).Abs() > 5*time.Minute {
		return "bad date"
	}
	body, _ := io.ReadAll(r.Body)
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	if r.Header.Get("X-Amz-Content-Sha256") != hash {
		return "body hash mismatch"
	}
	// The request as the client signed it: method, URL, the signed
	// headers only, the body length.
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	again.ContentLength = r.ContentLength
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		switch h {
		case "host", "content-length":
		default:
			if vals := r.Header.Values(h); len(vals) > 0 {
				again.Header[http.CanonicalHeaderKey(h)] = vals
			} else {
				return "signed header " + h + " is missing"
			}
		}
	}
	if tok := v.tokens[key]; tok != "" && r.Header.Get("X-Amz-Security-Token") != tok {
		return "wrong session token"
	}
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret, SessionToken: v.tokens[key]}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hash, Service, region, when); err != nil {
		return err.Error()
	}
	if again.Header.Get("Authorization") != auth {
		return "signature mismatch"
	}
	return ""
}

func newVerifier(t *testing.T, now time.Time) (*verifier, *httptest.Server) {
	v := &verifier{t: t, secrets: map[string]string{testKey: testSecret, "ASIATEMP": "temp-secret"},
		tokens: map[string]string{"ASIATEMP": "session-token"}, region: testRegion, now: now}
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)
	return v, srv
}

func call(t *testing.T, c *http.Client, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

func TestTransportSignaturesVerify(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	_, srv := newVerifier(t, now)
	static := credentials.NewStaticCredentialsProvider(testKey, testSecret, "")
	temporary := credentials.NewStaticCredentialsProvider("ASIATEMP", "temp-secret", "session-token")
	cases := []struct {
		name   string
		tr     *Transport
		method string
		path   string
		body   string
		hdr    []string
		want   int
	}{
		{"get", &Transport{Credentials: static, Region: testRegion}, http.MethodGet, "/ojs/v1/jobs/019a?x=1&a=2", "", nil, 200},
		{"post json", &Transport{Credentials: static, Region: testRegion}, http.MethodPost, "/ojs/v1/jobs",
			`{"type":"email.send","args":["a@b.c"]}`, []string{"Content-Type", "application/openjobspec+json", "X-Request-Id", "r1"}, 200},
		{"delete", &Transport{Credentials: static, Region: testRegion}, http.MethodDelete, "/ojs/v1/jobs/019a", "", nil, 200},
		{"path needing escapes", &Transport{Credentials: static, Region: testRegion}, http.MethodGet, "/ojs/v1/cron/nightly%20report", "", nil, 200},
		{"temporary credentials", &Transport{Credentials: temporary, Region: testRegion}, http.MethodPost, "/ojs/v1/workers/fetch", `{"queues":["q"]}`, nil, 200},
		{"wrong secret", &Transport{Credentials: credentials.NewStaticCredentialsProvider(testKey, "nope", ""), Region: testRegion},
			http.MethodGet, "/ojs/v1/health", "", nil, 403},
		{"wrong region", &Transport{Credentials: static, Region: "us-east-1"}, http.MethodGet, "/ojs/v1/health", "", nil, 403},
		{"wrong service", &Transport{Credentials: static, Region: testRegion, Service: "lambda"}, http.MethodGet, "/ojs/v1/health", "", nil, 403},
		{"body changed after signing", &Transport{Credentials: static, Region: testRegion, Base: tamper{}}, http.MethodPost, "/ojs/v1/jobs",
			`{"type":"a"}`, nil, 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, msg := call(t, &http.Client{Transport: tc.tr}, tc.method, srv.URL+tc.path, tc.body, tc.hdr...)
			if status != tc.want {
				t.Errorf("status %d (%s), want %d", status, msg, tc.want)
			}
		})
	}
	// Without the transport, the verifier refuses.
	if status, _ := call(t, http.DefaultClient, http.MethodGet, srv.URL+"/ojs/v1/health", ""); status != 403 {
		t.Errorf("unsigned request: status %d", status)
	}
}

// tamper replaces the body of a signed request, as a man in the middle
// would.
type tamper struct{}

func (tamper) RoundTrip(r *http.Request) (*http.Response, error) {
	b := []byte(`{"type":"b"}`)
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	return http.DefaultTransport.RoundTrip(r)
}

func TestTransportLeavesTheRequestAlone(t *testing.T) {
	t.Parallel()
	_, srv := newVerifier(t, time.Now().UTC())
	tr := &Transport{Credentials: credentials.NewStaticCredentialsProvider(testKey, testSecret, ""), Region: testRegion}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ojs/v1/jobs", strings.NewReader(`{"type":"a"}`))
	signed, err := tr.Sign(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("Authorization") != "" || req.Header.Get("X-Amz-Date") != "" {
		t.Errorf("the caller's request was modified: %v", req.Header)
	}
	if signed.Header.Get("Authorization") == "" {
		t.Fatal("clone not signed")
	}
	// The caller's body is still readable (GetBody was used).
	b, _ := io.ReadAll(req.Body)
	if string(b) != `{"type":"a"}` {
		t.Errorf("caller's body %q", b)
	}
}

func TestRegionFromURL(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"https://abc123.execute-api.eu-west-1.amazonaws.com":            testRegion,
		"https://abc123.execute-api.us-gov-west-1.amazonaws.com/ojs/v1": "us-gov-west-1",
		"https://abc123.execute-api.cn-north-1.amazonaws.com.cn":        "cn-north-1",
		"https://abc123.execute-api.ap-southeast-2.amazonaws.com:443/x": "ap-southeast-2",
		"http://127.0.0.1:8080":                                      "",
		"https://api.example.com":                                    "",
		"https://abc.lambda-url.eu-west-1.on.aws":                    "",
		"https://abc123.execute-api.eu-west-1.amazonaws.com.evil.io": "",
		"::not a url": "",
	} {
		got, ok := RegionFromURL(url)
		if got != want || ok != (want != "") {
			t.Errorf("RegionFromURL(%q) = %q, %v; want %q", url, got, ok, want)
		}
	}
}

func TestEnabled(t *testing.T) {
	t.Parallel()
	api := "https://abc123.execute-api.eu-west-1.amazonaws.com"
	for _, tc := range []struct {
		url, setting string
		want, err    bool
	}{
		{api, "", true, false},
		{"http://127.0.0.1:8080", "", false, false},
		{"https://ojs.example.com", "1", true, false},
		{api, "0", false, false},
		{api, "maybe", false, true},
	} {
		got, err := Enabled(tc.url, tc.setting)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("Enabled(%q, %q) = %v, %v", tc.url, tc.setting, got, err)
		}
	}
}

// isolate points the SDK's credential chain at this test's environment
// only: no shared config files, no instance metadata.
func isolate(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_PROFILE": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_WEB_IDENTITY_TOKEN_FILE": "",
	} {
		t.Setenv(k, v)
	}
}

// TestNewTransportUsesTheCredentialChain is the e2e suite's wiring:
// credentials from the standard chain (here the environment and then a
// shared credentials file), region from the URL or AWS_REGION, and a
// request through it verified by the stand-in authorizer.
func TestNewTransportUsesTheCredentialChain(t *testing.T) {
	isolate(t)
	_, srv := newVerifier(t, time.Now().UTC())
	ctx := context.Background()

	// No region anywhere: a clear error.
	if _, err := NewTransport(ctx, srv.URL); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("NewTransport without a region: %v", err)
	}
	// Region from the execute-api URL wins over AWS_REGION.
	t.Setenv("AWS_REGION", "us-east-1")
	tr, err := NewTransport(ctx, "https://abc123.execute-api.eu-west-1.amazonaws.com")
	if err != nil || tr.Region != testRegion {
		t.Fatalf("region from URL: %+v, %v", tr, err)
	}
	// Credentials from the environment, region from AWS_REGION.
	t.Setenv("AWS_REGION", testRegion)
	t.Setenv("AWS_ACCESS_KEY_ID", "ASIATEMP")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "temp-secret")
	t.Setenv("AWS_SESSION_TOKEN", "session-token")
	tr, err = NewTransport(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if status, msg := call(t, &http.Client{Transport: tr}, http.MethodPost, srv.URL+"/ojs/v1/jobs", `{"type":"a"}`); status != 200 {
		t.Errorf("environment credentials: %d %s", status, msg)
	}
	// Credentials from a shared credentials file profile.
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
	}
	file := os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	if err := os.WriteFile(file, []byte("[ops]\naws_access_key_id = "+testKey+"\naws_secret_access_key = "+testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_PROFILE", "ops")
	tr, err = NewTransport(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if status, msg := call(t, &http.Client{Transport: tr}, http.MethodGet, srv.URL+"/ojs/v1/health", ""); status != 200 {
		t.Errorf("profile credentials: %d %s", status, msg)
	}
}
