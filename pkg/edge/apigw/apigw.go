// Package apigw adapts API Gateway HTTP API (payload format 2.0) events to
// net/http and back: Handler serves an http.Handler from the api function,
// and Event/WriteResponse let the local runtime play API Gateway.
package apigw

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// Handler returns a Lambda handler that serves h. With tenantClaim set, a
// request whose JWT (the stage's JWT authorizer verified it) holds that
// claim is bound to the claim's tenant (job.WithCredentialTenant).
func Handler(h http.Handler, tenantClaim string) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		if a := ev.RequestContext.Authorizer; tenantClaim != "" && a != nil && a.JWT != nil && a.JWT.Claims[tenantClaim] != "" {
			ctx = job.WithCredentialTenant(ctx, a.JWT.Claims[tenantClaim])
		}
		req, err := Request(ctx, ev)
		if err != nil {
			rid := "req_" + ev.RequestContext.RequestID
			body, _ := json.Marshal(map[string]any{"error": map[string]any{"code": "invalid_request", "message": "The request could not be decoded.", "retryable": false, "request_id": rid}})
			return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadRequest, Headers: map[string]string{"Content-Type": "application/openjobspec+json", "X-Request-Id": rid},
				Body: string(body)}, nil
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return Response(rec.Result())
	}
}

// Request builds the http.Request an event describes.
func Request(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	body, err := decodeBody(ev.Body, ev.IsBase64Encoded)
	if err != nil {
		return nil, fmt.Errorf("decode base64 body: %w", err)
	}
	target := escapePath(cmp.Or(ev.RawPath, ev.RequestContext.HTTP.Path))
	if ev.RawQueryString != "" {
		target += "?" + ev.RawQueryString
	}
	req, err := http.NewRequestWithContext(ctx, ev.RequestContext.HTTP.Method, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	if req.Header.Get("X-Request-Id") == "" && ev.RequestContext.RequestID != "" {
		req.Header.Set("X-Amzn-Request-Id", ev.RequestContext.RequestID)
	}
	req.RemoteAddr = ev.RequestContext.HTTP.SourceIP
	req.ContentLength = int64(len(body))
	return req, nil
}

// Response converts an http.Response into the event response.
func Response(res *http.Response) (events.APIGatewayV2HTTPResponse, error) {
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	out := events.APIGatewayV2HTTPResponse{StatusCode: res.StatusCode, Headers: map[string]string{}}
	for k, vs := range res.Header {
		if k == "Set-Cookie" {
			// Payload format 2.0 carries cookies apart: joined into one
			// header they would not reach the browser as set.
			out.Cookies = append(out.Cookies, vs...)
			continue
		}
		out.Headers[k] = strings.Join(vs, ", ")
	}
	out.Body, out.IsBase64Encoded = encodeBody(body)
	return out, nil
}

// Event builds the payload format 2.0 event API Gateway sends for r.
func Event(r *http.Request, requestID string, now time.Time) (events.APIGatewayV2HTTPRequest, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return events.APIGatewayV2HTTPRequest{}, err
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "$default", RawPath: r.URL.Path, RawQueryString: r.URL.RawQuery,
		Headers: map[string]string{},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: "$default", AccountID: "000000000000", Stage: "$default", RequestID: requestID, APIID: "local",
			DomainName: r.Host, Time: now.UTC().Format("02/Jan/2006:15:04:05 -0700"), TimeEpoch: now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: r.Method, Path: r.URL.Path, Protocol: r.Proto,
				SourceIP: strings.Split(r.RemoteAddr, ":")[0], UserAgent: r.UserAgent()},
		},
	}
	for k, vs := range r.Header {
		if strings.EqualFold(k, "Cookie") {
			ev.Cookies = append(ev.Cookies, vs...)
			continue
		}
		ev.Headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	if q := r.URL.Query(); len(q) > 0 {
		ev.QueryStringParameters = map[string]string{}
		for k, vs := range q {
			ev.QueryStringParameters[k] = strings.Join(vs, ",")
		}
	}
	if len(body) > 0 {
		ev.Body, ev.IsBase64Encoded = encodeBody(body)
	}
	return ev, nil
}

// WriteResponse writes an event response to w.
func WriteResponse(w http.ResponseWriter, res events.APIGatewayV2HTTPResponse) error {
	for k, v := range res.Headers {
		w.Header().Set(k, v)
	}
	for _, c := range res.Cookies {
		w.Header().Add("Set-Cookie", c)
	}
	body, err := decodeBody(res.Body, res.IsBase64Encoded)
	if err != nil {
		return err
	}
	w.WriteHeader(cmp.Or(res.StatusCode, http.StatusOK))
	_, err = w.Write(body)
	return err
}

// encodeBody is body as an event carries it: as is when it is UTF-8, else
// base64-encoded.
func encodeBody(body []byte) (string, bool) {
	if utf8.Valid(body) {
		return string(body), false
	}
	return base64.StdEncoding.EncodeToString(body), true
}

func decodeBody(body string, b64 bool) ([]byte, error) {
	if b64 {
		return base64.StdEncoding.DecodeString(body)
	}
	return []byte(body), nil
}

// escapePath makes path a valid escaped URL path. An HTTP API delivers
// rawPath percent-decoded (a Function URL does not), so it may hold bytes
// that cannot appear in a URL: controls, spaces, non-ASCII, '?' and '#'
// (which would split it) and a '%' that starts no escape. They are
// percent-encoded; escapes already there are kept.
func escapePath(path string) string {
	const hexDigits = "0123456789ABCDEF"
	isHex := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		c := path[i]
		escape := c <= ' ' || c >= 0x7f || c == '?' || c == '#' ||
			c == '%' && (i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2]))
		if !escape {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}
