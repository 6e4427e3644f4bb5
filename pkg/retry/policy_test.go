package retry

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	ok := map[string]time.Duration{
		"PT1S": time.Second, "PT0.5S": 500 * time.Millisecond, "PT5M": 5 * time.Minute,
		"PT1H30M": 90 * time.Minute, "P1D": 24 * time.Hour, "P1DT2H": 26 * time.Hour, "PT0S": 0,
	}
	for in, want := range ok {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "P", "PT", "1S", "PT-1S", "P1Y", "P1M", "PT1.S", "pt1s", "PT1S ", "5000"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
	for _, d := range []time.Duration{time.Second, 90 * time.Second, 500 * time.Millisecond, 2 * time.Hour} {
		back, err := ParseDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Errorf("round trip %v -> %q -> %v %v", d, FormatDuration(d), back, err)
		}
	}
}

func TestParseMergesOverDefaults(t *testing.T) {
	t.Parallel()
	p, err := Parse(json.RawMessage(`{"max_attempts":10,"on_exhaustion":"dead_letter"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.MaxAttempts, want.OnExhaustion = 10, OnExhaustionDeadLetter
	if p.MaxAttempts != want.MaxAttempts || p.OnExhaustion != want.OnExhaustion || p.InitialInterval != time.Second ||
		p.MaxInterval != 5*time.Minute || !p.Jitter || p.BackoffCoefficient != 2 || p.Strategy != Exponential {
		t.Fatalf("got %+v", p)
	}
	ms, err := Parse(json.RawMessage(`{"initial_interval_ms":1500,"max_interval_ms":300000,"jitter":false}`))
	if err != nil || ms.InitialInterval != 1500*time.Millisecond || ms.Jitter {
		t.Fatalf("ms spelling: %+v %v", ms, err)
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"negative attempts":   `{"max_attempts":-1}`,
		"fractional attempts": `{"max_attempts":1.5}`,
		"bad interval":        `{"initial_interval":"1s"}`,
		"zero interval":       `{"initial_interval":"PT0S"}`,
		"coefficient < 1":     `{"backoff_coefficient":0.5}`,
		"max < initial":       `{"initial_interval":"PT10S","max_interval":"PT1S"}`,
		"jitter not bool":     `{"jitter":"yes"}`,
		"nre not strings":     `{"non_retryable_errors":[1]}`,
		"bad exhaustion":      `{"on_exhaustion":"explode"}`,
		"bad strategy":        `{"backoff_strategy":"random"}`,
		"not an object":       `[1]`,
	} {
		_, err := Parse(json.RawMessage(in))
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: want FieldError, got %v", name, err)
		}
	}
}

func TestDelayStrategies(t *testing.T) {
	t.Parallel()
	mk := func(s Strategy, coef float64) Policy {
		p := Default()
		p.Strategy, p.BackoffCoefficient, p.Jitter = s, coef, false
		p.InitialInterval, p.MaxInterval = 5*time.Second, 300*time.Second
		return p
	}
	cases := []struct {
		p       Policy
		attempt int
		want    time.Duration
	}{
		{mk(None, 2), 1, 5 * time.Second}, {mk(None, 2), 4, 5 * time.Second},
		{mk(Linear, 2), 1, 5 * time.Second}, {mk(Linear, 2), 3, 15 * time.Second},
		{mk(Exponential, 2), 1, 5 * time.Second}, {mk(Exponential, 2), 3, 20 * time.Second},
		{mk(Exponential, 2), 10, 300 * time.Second}, // capped
		{mk(Polynomial, 2), 3, 45 * time.Second},
		{mk(Exponential, 2), 10000, 300 * time.Second}, // overflow guarded
	}
	for _, c := range cases {
		if got := c.p.Delay(c.attempt, nil); got != c.want {
			t.Errorf("%s attempt %d: %v, want %v", c.p.Strategy, c.attempt, got, c.want)
		}
	}
}

func TestJitterBoundsAndPostCap(t *testing.T) {
	t.Parallel()
	p := Default()
	p.InitialInterval, p.MaxInterval = 10*time.Second, 300*time.Second
	if got := p.Delay(1, func() float64 { return 0 }); got != 5*time.Second {
		t.Fatalf("low jitter %v", got)
	}
	if got := p.Delay(1, func() float64 { return 0.999999 }); got < 14*time.Second || got >= 15*time.Second {
		t.Fatalf("high jitter %v", got)
	}
	if got := p.Delay(6, func() float64 { return 0.99 }); got != 300*time.Second {
		t.Fatalf("post-jitter cap not applied: %v", got)
	}
}

func TestNonRetryableMatching(t *testing.T) {
	t.Parallel()
	p := Default()
	p.NonRetryableErrors = []string{"validation.payload_invalid", "auth.*"}
	for typ, want := range map[string]bool{
		"validation.payload_invalid": true, "validation.schema_error": false,
		"auth.token_expired": true, "auth.forbidden": true, "auth": false, "external.auth.failure": false, "": false,
	} {
		if got := p.IsNonRetryable(typ); got != want {
			t.Errorf("%q: %v, want %v", typ, got, want)
		}
	}
}

func TestPolicyJSONRoundTrip(t *testing.T) {
	t.Parallel()
	p := Default()
	p.MaxAttempts, p.Strategy, p.InitialInterval = 7, Linear, 1500*time.Millisecond
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.MaxAttempts != 7 || back.Strategy != Linear || back.InitialInterval != 1500*time.Millisecond {
		t.Fatalf("round trip %s -> %+v", b, back)
	}
}
