package ojserr

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestStatusMapping(t *testing.T) {
	t.Parallel()
	cases := map[Code]int{
		InvalidRequest:       http.StatusBadRequest,
		InvalidPayload:       http.StatusBadRequest,
		NotFound:             http.StatusNotFound,
		Conflict:             http.StatusConflict,
		ValidationError:      http.StatusUnprocessableEntity,
		Duplicate:            http.StatusConflict,
		QueuePaused:          http.StatusUnprocessableEntity,
		PayloadTooLarge:      http.StatusRequestEntityTooLarge,
		UnsupportedMediaType: http.StatusUnsupportedMediaType,
		BackendError:         http.StatusInternalServerError,
	}
	for code, want := range cases {
		if got := New(code, "x").Status(); got != want {
			t.Errorf("%s: status %d, want %d", code, got, want)
		}
	}
}

func TestAsWrapsUnknownErrorsWithoutLeaking(t *testing.T) {
	t.Parallel()
	inner := errors.New("dial tcp 10.0.0.1:443: secret detail")
	e := As(fmt.Errorf("put job: %w", inner))
	if e.Code != BackendError || !e.Retryable || e.Status() != 500 {
		t.Fatalf("unexpected %+v", e)
	}
	if e.Message == "" || errors.Unwrap(e) == nil {
		t.Fatal("cause must be kept for logs")
	}
	if got := As(Invalid("args", "bad")); got.Code != InvalidRequest || got.Details["field"] != "args" {
		t.Fatalf("As changed an API error: %+v", got)
	}
	if !Is(fmt.Errorf("wrap: %w", NotFoundf("job", "1")), NotFound) {
		t.Fatal("Is must see through wrapping")
	}
}

func TestStateConflictAndNotFound(t *testing.T) {
	t.Parallel()
	if e := StateConflict(InvalidRequest, "x"); e.Status() != http.StatusConflict || e.Code != InvalidRequest {
		t.Fatalf("%+v", e)
	}
	nf := NotFoundf("job", "abc")
	if nf.Status() != 404 || nf.Hint == "" || nf.Message != "Job 'abc' not found." {
		t.Fatalf("%+v", nf)
	}
}
