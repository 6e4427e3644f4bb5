package apigw

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// An HTTP API delivers rawPath percent-decoded: a path with control
// characters, '?', '#' or non-ASCII must still reach the handler as that
// path (found by the bad-input catalog: GET /ojs/v1/jobs/%00 was answered
// by the adapter's fallback instead of the API's 400).
func TestDecodedRawPathReachesTheHandler(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"/ojs/v1/jobs/\x00":         "/ojs/v1/jobs/\x00",
		"/ojs/v1/jobs/a?b#c":        "/ojs/v1/jobs/a?b#c",
		"/ojs/v1/queues/é q/stats":  "/ojs/v1/queues/é q/stats",
		"/ojs/v1/queues/\xff/pause": "/ojs/v1/queues/\xff/pause",
		"/ojs/v1/jobs/100%":         "/ojs/v1/jobs/100%",
		"/ojs/v1/jobs/%zz":          "/ojs/v1/jobs/%zz",
		"/ojs/v1/jobs/a%2Fb":        "/ojs/v1/jobs/a/b", // already escaped (Function URL)
	} {
		var got, query string
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, query = r.URL.Path, r.URL.RawQuery })
		ev := events.APIGatewayV2HTTPRequest{RawPath: raw, RawQueryString: "limit=1",
			RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET"}}}
		res, err := Handler(h, "")(context.Background(), ev)
		if err != nil || res.StatusCode != 200 || got != want || query != "limit=1" {
			t.Errorf("%q: handler saw %q ?%s (status %d, %v)", raw, got, query, res.StatusCode, err)
		}
	}
}

// A request the adapter cannot decode still gets an OJS error envelope
// with a request id.
func TestUndecodableRequestHasRequestID(t *testing.T) {
	t.Parallel()
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/ojs/v1/jobs", Body: "%%%", IsBase64Encoded: true,
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "abc", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}}}
	res, err := Handler(http.NotFoundHandler(), "")(context.Background(), ev)
	if err != nil || res.StatusCode != 400 || res.Headers["X-Request-Id"] != "req_abc" ||
		res.Body != `{"error":{"code":"invalid_request","message":"The request could not be decoded.","request_id":"req_abc","retryable":false}}` {
		t.Fatalf("%d %v %s (%v)", res.StatusCode, res.Headers, res.Body, err)
	}
}
