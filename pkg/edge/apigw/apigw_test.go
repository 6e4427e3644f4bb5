package apigw

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

func TestHandlerServesSampleEvent(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../events/apigw-v2-push.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	var got struct{ method, path, ctype, rid, body string }
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.method, got.path, got.ctype, got.rid, got.body = r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("X-Request-Id"), string(b)
		w.Header().Set("Location", "/x")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	res, err := Handler(h, "")(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got.method != "POST" || got.path != "/ojs/v1/jobs" || got.ctype != "application/openjobspec+json" || got.rid != "req_sample-0001" ||
		!strings.Contains(got.body, `"demo.greet"`) {
		t.Fatalf("request seen by handler: %+v", got)
	}
	if res.StatusCode != 201 || res.Body != `{"ok":true}` || res.Headers["Location"] != "/x" || res.IsBase64Encoded {
		t.Fatalf("response: %+v", res)
	}
}

func TestEventRoundTrip(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "http://localhost:8080/ojs/v1/workers/fetch?x=1", strings.NewReader(`{"queues":["a"]}`))
	r.Header.Set("Content-Type", "application/json")
	ev, err := Event(r, "rid", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	back, err := Request(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(back.Body)
	if back.Method != "POST" || back.URL.Path != "/ojs/v1/workers/fetch" || back.URL.RawQuery != "x=1" || string(b) != `{"queues":["a"]}` ||
		back.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("round trip: %+v %s", back, b)
	}
	bin := events.APIGatewayV2HTTPRequest{Body: "AAEC", IsBase64Encoded: true, RawPath: "/x"}
	bin.RequestContext.HTTP.Method = "POST"
	br, err := Request(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(br.Body); string(b) != "\x00\x01\x02" {
		t.Fatalf("base64 body: %q", b)
	}
	w := httptest.NewRecorder()
	if err := WriteResponse(w, events.APIGatewayV2HTTPResponse{StatusCode: 409, Body: "{}", Headers: map[string]string{"A": "b"}}); err != nil || w.Code != 409 || w.Header().Get("A") != "b" {
		t.Fatalf("write response: %v %+v", err, w)
	}
}

// Set-Cookie leaves in the response's cookies (payload format 2.0), one
// per cookie, and a request's cookies reach the handler as a Cookie header.
func TestCookies(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("b"); err != nil || c.Value != "2" {
			t.Errorf("request cookie: %v %v", c, err)
		}
		http.SetCookie(w, &http.Cookie{Name: "x", Value: "1", HttpOnly: true})
		http.SetCookie(w, &http.Cookie{Name: "y", Value: "2"})
	})
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/ojs/admin/", Cookies: []string{"a=1", "b=2"}}
	ev.RequestContext.HTTP.Method = "GET"
	res, err := Handler(h, "")(context.Background(), ev)
	if err != nil || len(res.Cookies) != 2 || res.Cookies[0] != "x=1; HttpOnly" || res.Cookies[1] != "y=2" || res.Headers["Set-Cookie"] != "" {
		t.Fatalf("cookies: %v %v %v", res.Cookies, res.Headers, err)
	}
}

// A JWT holding the configured tenant claim binds its request to the
// tenant; without the claim, or with no claim configured, it is unbound.
func TestTenantClaimBindsTheRequest(t *testing.T) {
	t.Parallel()
	var seen string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = job.CredentialTenant(r.Context()) })
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/ojs/v1/jobs"}
	ev.RequestContext.HTTP.Method = "GET"
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"ojs_tenant": "acme", "sub": "u1"}}}
	for claim, want := range map[string]string{"ojs_tenant": "acme", "": "", "other": ""} {
		seen = "unset"
		if _, err := Handler(h, claim)(context.Background(), ev); err != nil || seen != want {
			t.Errorf("claim %q: bound to %q (%v), want %q", claim, seen, err, want)
		}
	}
}
