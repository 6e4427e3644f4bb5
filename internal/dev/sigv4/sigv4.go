// Package sigv4 signs HTTP requests to an IAM-authorised API Gateway stage
// with AWS Signature Version 4 (service execute-api), using the AWS SDK for
// Go v2's signer and credential chain. The end-to-end suite uses it to run
// against a deployed stage; any Go OJS client can wrap its transport the
// same way.
package sigv4

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Service is the signing name of API Gateway's invoke API.
const Service = "execute-api"

// emptySHA256 is the payload hash of a request without a body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Transport is an http.RoundTripper that signs every request before
// sending it. Requests are cloned, never modified.
type Transport struct {
	// Base sends the signed request. Default http.DefaultTransport.
	Base http.RoundTripper
	// Credentials provides the signing credentials. Required.
	Credentials aws.CredentialsProvider
	// Region is the signing region, e.g. "eu-west-1". Required.
	Region string
	// Service is the signing name. Default Service ("execute-api").
	Service string
	// Signer signs. Default v4.NewSigner().
	Signer *v4.Signer
	// Now is the signing clock. Default time.Now.
	Now func() time.Time
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip signs a clone of req and sends it with Base. It fails before
// sending when the credentials cannot be retrieved or the body read.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	signed, err := t.Sign(req.Context(), req)
	// The clone carries a body of its own; the caller's is done with
	// either way (a RoundTripper closes it, even on error).
	if req.Body != nil {
		req.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	return cmp.Or(t.Base, http.DefaultTransport).RoundTrip(signed)
}

// Sign returns a clone of req with the SigV4 headers (Authorization,
// X-Amz-Date, X-Amz-Content-Sha256 and, with temporary credentials,
// X-Amz-Security-Token). It reads req's body (through GetBody when set)
// and gives the clone a body of its own.
func (t *Transport) Sign(ctx context.Context, req *http.Request) (*http.Request, error) {
	if t.Credentials == nil || t.Region == "" {
		return nil, errors.New("sigv4: Transport needs Credentials and Region")
	}
	out := req.Clone(ctx)
	hash := emptySHA256
	if req.Body != nil && req.Body != http.NoBody {
		var body []byte
		var err error
		if req.GetBody != nil {
			var rc io.ReadCloser
			if rc, err = req.GetBody(); err == nil {
				body, err = io.ReadAll(rc)
				rc.Close()
			}
		} else {
			body, err = io.ReadAll(req.Body)
		}
		if err != nil {
			return nil, fmt.Errorf("sigv4: read body: %w", err)
		}
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.ContentLength = int64(len(body))
	}
	creds, err := t.Credentials.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("sigv4: retrieve credentials: %w", err)
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	out.Header.Set("X-Amz-Content-Sha256", hash)
	if err := cmp.Or(t.Signer, v4.NewSigner()).SignHTTP(ctx, creds, out, hash, cmp.Or(t.Service, Service), t.Region, now().UTC()); err != nil {
		return nil, fmt.Errorf("sigv4: sign: %w", err)
	}
	return out, nil
}

// executeAPIHost matches API Gateway's default endpoints:
// <api id>.execute-api.<region>.amazonaws.com (.com.cn in China).
var executeAPIHost = regexp.MustCompile(`^[a-z0-9]+\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$`)

// RegionFromURL returns the region of an API Gateway default endpoint URL
// (https://abc123.execute-api.eu-west-1.amazonaws.com/...) and whether the
// URL is one.
func RegionFromURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	m := executeAPIHost.FindStringSubmatch(u.Hostname())
	if m == nil {
		return "", false
	}
	return m[1], true
}

// NewTransport returns a Transport for calling the API at baseURL with the
// standard AWS credential chain (environment, shared config and profile,
// SSO, container and instance roles). The region is the one in baseURL when
// it is an execute-api endpoint, else the configured one (AWS_REGION,
// AWS_DEFAULT_REGION or the profile's); with neither it fails.
func NewTransport(ctx context.Context, baseURL string) (*Transport, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("sigv4: load AWS config: %w", err)
	}
	region, ok := RegionFromURL(baseURL)
	if !ok {
		region = cfg.Region
	}
	if region == "" {
		return nil, fmt.Errorf("sigv4: no region: %s is not an execute-api URL and AWS_REGION is not set", baseURL)
	}
	return &Transport{Credentials: cfg.Credentials, Region: region}, nil
}

// Enabled decides whether requests to baseURL are signed, from a setting
// such as the e2e suite's OJS_SIGV4: "1", "true" or "on" always sign; "0",
// "false" or "off" never do; "" (auto) signs API Gateway execute-api
// endpoints only (a custom domain needs "1" and AWS_REGION). Other values
// are an error.
func Enabled(baseURL, setting string) (bool, error) {
	switch setting {
	case "1", "true", "on":
		return true, nil
	case "0", "false", "off":
		return false, nil
	case "":
		_, ok := RegionFromURL(baseURL)
		return ok, nil
	}
	return false, fmt.Errorf("sigv4: setting %q: want 1, 0 or empty (auto)", setting)
}
