package store

import (
	"errors"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// APIError maps the store's errors about job id to the API's: ErrNotFound
// is a 404, a *ConflictError a 409 naming the job's current state and the
// state op tried to reach, an *ojserr.Error stays as it is, anything else
// is a backend error (its details logged, never shown). nil stays nil.
func APIError(err error, id, op string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) {
		return ojserr.NotFoundf("job", id)
	}
	if ce, ok := errors.AsType[*ConflictError](err); ok {
		return ojserr.StateConflict(ojserr.Conflict, "Cannot %s job in state '%s'.", op, ce.Current.State).
			With("job_id", id).With("current_state", string(ce.Current.State)).With("target_state", string(ce.Tried.To))
	}
	if oe, ok := errors.AsType[*ojserr.Error](err); ok {
		return oe
	}
	return ojserr.Backend(err)
}
