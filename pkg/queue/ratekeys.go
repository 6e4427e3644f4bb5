package queue

import (
	"context"
	"errors"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/ratelimit"
)

// The rate limit keys' routes (ojs-rate-limiting.md 10): a key's state,
// an operator's override, the listing.

// KeyInfo is the state of rate limit key key (10.1); an ojserr not-found
// error for a key no job was admitted with.
func (s *Service) KeyInfo(ctx context.Context, key string) (*ratelimit.Info, error) {
	if err := job.ValidateRateKey("key", key); err != nil {
		return nil, err
	}
	st, err := s.keys.Get(ctx, key)
	return s.keyInfo(key, st, err)
}

// keyInfo answers a key's state as read or written.
func (s *Service) keyInfo(key string, st *ratelimit.State, err error) (*ratelimit.Info, error) {
	if errors.Is(err, ratelimit.ErrNotFound) {
		return nil, ojserr.NotFoundf("rate limit key", key)
	}
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	in := st.Info(s.clock())
	return &in, nil
}

// OverrideKey sets (body: the limits and an optional expires_at, 10.2)
// or, with a nil body, removes an operator's override of key's limits,
// and answers the key's state. The override applies to every claim
// decided after it; the jobs' own policy returns when it expires or is
// removed.
func (s *Service) OverrideKey(ctx context.Context, key string, body []byte) (*ratelimit.Info, error) {
	now := s.clock()
	if body == nil {
		if err := job.ValidateRateKey("key", key); err != nil {
			return nil, err
		}
		st, err := s.keys.ClearOverride(ctx, key, now)
		return s.keyInfo(key, st, err)
	}
	p, until, err := job.ParseKeyOverride(key, body, now)
	if err != nil {
		return nil, err
	}
	st, err := s.keys.SetOverride(ctx, p, until, now)
	return s.keyInfo(key, st, err)
}

// MaxKeysPage bounds a page of ListKeys.
const MaxKeysPage = 100

// KeyPage is a page of the rate limit keys (10.3).
type KeyPage struct {
	Items      []ratelimit.Info `json:"items"`
	Pagination struct {
		Total   int `json:"total"`
		Page    int `json:"page"`
		PerPage int `json:"per_page"`
	} `json:"pagination"`
}

// ListKeys answers page (from 1) of perPage keys in key order, each
// with its state: every key a job was admitted with or an operator
// overrode.
func (s *Service) ListKeys(ctx context.Context, page, perPage int) (*KeyPage, error) {
	names, err := s.keys.Names(ctx)
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	out := &KeyPage{Items: []ratelimit.Info{}}
	out.Pagination.Total, out.Pagination.Page, out.Pagination.PerPage = len(names), page, perPage
	from := min((page-1)*perPage, len(names))
	states, err := s.keys.States(ctx, names[from:min(from+perPage, len(names))])
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	now := s.clock()
	for _, st := range states {
		out.Items = append(out.Items, st.Info(now))
	}
	return out, nil
}
