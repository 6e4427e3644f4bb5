package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// Limits of a progress report (ojs-progress.md 5.2 recommends 4 KB of data).
const (
	MaxProgressDataBytes = 4096
	MaxProgressMessage   = 1024
)

// AgentTokenBudgetExceeded is the error of an attempt that reported more
// tokens than its job's budget (ojs-ai-agents.md 3.1).
const AgentTokenBudgetExceeded = "AGENT_TOKEN_BUDGET_EXCEEDED"

// ProgressInput is a worker's progress report as sent: at least one of
// its fields is set.
type ProgressInput struct {
	Progress *float64        `json:"progress"`
	Message  string          `json:"message"`
	Data     json.RawMessage `json:"data"`
	// Checkpoint is what a retry needs to resume (6.4): a JSON object of
	// at most MaxProgressDataBytes, kept across attempts and shown on the
	// job as last_checkpoint.
	Checkpoint json.RawMessage `json:"checkpoint"`
	// TokensUsed is the AI agent tokens the attempt has used so far
	// (ext_agent_tokens_used): past the job's ext_agent_token_budget the
	// attempt fails (docs/ai-agents.md).
	TokensUsed *int64 `json:"ext_agent_tokens_used"`
}

// ReportProgress records a progress report on an active job and counts
// as its heartbeat (ojs-progress.md 6.3). A fraction outside [0, 1] is
// clamped, one lower than the attempt's last is not kept (the message and
// data are), and a report on a job that is not active changes nothing:
// it answers the job as it is (6.1: ignored, not refused).
func (s *Service) ReportProgress(ctx context.Context, id string, in ProgressInput) (*job.Job, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	data, ckpt := in.Data, in.Checkpoint
	if string(data) == "null" {
		data = nil
	}
	if string(ckpt) == "null" {
		ckpt = nil
	}
	switch {
	case in.Progress == nil && in.Message == "" && data == nil && in.TokensUsed == nil:
		return nil, ojserr.Invalid("progress", "A progress report needs 'progress', 'message', 'data' or 'ext_agent_tokens_used'.")
	case in.TokensUsed != nil && *in.TokensUsed < 0:
		return nil, ojserr.Invalid("ext_agent_tokens_used", "'ext_agent_tokens_used' must be a whole number of at least 0.")
	case in.Progress != nil && math.IsNaN(*in.Progress):
		return nil, ojserr.Invalid("progress", "'progress' must be a number from 0 to 1.")
	case data != nil && (len(data) > MaxProgressDataBytes || data[0] != '{'):
		return nil, ojserr.Invalid("data", "'data' must be a JSON object of at most %d bytes.", MaxProgressDataBytes)
	case ckpt != nil && (len(ckpt) > MaxProgressDataBytes || ckpt[0] != '{'):
		return nil, ojserr.Invalid("checkpoint", "'checkpoint' must be a JSON object of at most %d bytes.", MaxProgressDataBytes)
	case len(in.Message) > MaxProgressMessage:
		return nil, ojserr.Invalid("message", "'message' is longer than %d characters.", MaxProgressMessage)
	}
	now := s.Now()
	p := job.Progress{Message: in.Message, Data: data, UpdatedAt: job.Timestamp(now), TokensUsed: in.TokensUsed}
	if in.Progress != nil {
		v := min(max(*in.Progress, 0), 1)
		p.Value = &v
	}
	j, err := s.st.Apply(ctx, store.ReportProgress(id, p, ckpt))
	var ce *store.ConflictError
	if errors.As(err, &ce) && ce.Current != nil && ce.Current.State == job.Active && p.Value != nil {
		// A lower fraction than the attempt's last: keep the rest.
		p.Value = nil
		j, err = s.st.Apply(ctx, store.ReportProgress(id, p, ckpt))
	}
	if errors.As(err, &ce) && ce.Current != nil {
		return ce.Current, nil
	}
	if err != nil {
		return nil, store.APIError(err, id, "report progress of")
	}
	if used, budget, ok := j.AgentTokens(); ok && used > budget {
		// ojs-ai-agents.md 3.1: the attempt fails with
		// AGENT_TOKEN_BUDGET_EXCEEDED under the job's retry policy; the
		// next attempt starts with no tokens used.
		return s.Nack(ctx, id, ErrorInput{Type: AgentTokenBudgetExceeded, Code: AgentTokenBudgetExceeded,
			Message: fmt.Sprintf("The attempt used %d tokens; the job's budget is %d.", used, budget)}, j.Attempt)
	}
	if _, _, err := s.extend(ctx, id, "", time.Time{}, now); err != nil {
		s.log.WarnContext(ctx, "progress heartbeat failed", "job_id", id, "error", err.Error())
	}
	return j, nil
}
