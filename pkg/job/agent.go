package job

import (
	"cmp"
	"encoding/json"
	"strings"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// The AI agent extension's attributes (ojs-ai-agents.md 2), top-level
// envelope attributes kept in Extra as sent, checked at enqueue
// (checkAgent) and, for a delegated job, bounded by its parent's
// delegation chain (Delegate; docs/ai-agents.md).
const (
	AgentParentID     = "ext_agent_parent_id"
	AgentDepth        = "ext_agent_delegation_depth"
	AgentMaxDepth     = "ext_agent_max_delegation_depth"
	AgentTokenBudget  = "ext_agent_token_budget"
	AgentTokensUsed   = "ext_agent_tokens_used"
	agentToolResults  = "ext_agent_tool_results"
	MaxAgentDepth     = 10 // ojs-ai-agents.md 2.3
	maxAgentListItems = 128
	maxAgentText      = 256
)

// agentAttrs are the typed attributes checkAgent reads.
type agentAttrs struct {
	Model          *string          `json:"ext_agent_model"`
	Provider       *string          `json:"ext_agent_provider"`
	FallbackModels []string         `json:"ext_agent_fallback_models"`
	Temperature    *float64         `json:"ext_agent_temperature"`
	MaxTokens      *float64         `json:"ext_agent_max_tokens"`
	TokenBudget    *float64         `json:"ext_agent_token_budget"`
	Tools          []map[string]any `json:"ext_agent_tools"`
	ToolChoice     *string          `json:"ext_agent_tool_choice"`
	ParentID       *string          `json:"ext_agent_parent_id"`
	Depth          *float64         `json:"ext_agent_delegation_depth"`
	MaxDepth       *float64         `json:"ext_agent_max_delegation_depth"`
	OutputSchema   map[string]any   `json:"ext_agent_output_schema"`
	OutputFormat   *string          `json:"ext_agent_output_format"`
}

// checkAgent checks j's ext_agent_* attributes (a 400 naming the one of
// the wrong shape; a delegation deeper than its maximum is a 422
// AGENT_MAX_DELEGATION_DEPTH, ojs-ai-agents.md 3) and sets the
// system-managed ones: a client's ext_agent_tokens_used and
// ext_agent_tool_results are dropped, and a job with a token budget starts
// with ext_agent_tokens_used 0.
func checkAgent(j *Job) error {
	if !hasPrefix(j.Extra, "ext_agent_") {
		return nil
	}
	delete(j.Extra, AgentTokensUsed)
	delete(j.Extra, agentToolResults)
	raw, _ := json.Marshal(j.Extra)
	var a agentAttrs
	if err := json.Unmarshal(raw, &a); err != nil {
		return ojserr.Invalid("ext_agent", "The ext_agent_* attributes must have the AI agent extension's types: %v.", jsonProblem(err))
	}
	for name, s := range map[string]*string{"ext_agent_model": a.Model, "ext_agent_provider": a.Provider, AgentParentID: a.ParentID} {
		if s != nil && (*s == "" || len(*s) > maxAgentText) {
			return ojserr.Invalid(name, "'%s' must be 1 to %d bytes.", name, maxAgentText)
		}
	}
	switch {
	case len(a.FallbackModels) > maxAgentListItems || len(a.Tools) > maxAgentListItems:
		return ojserr.Invalid("ext_agent", "ext_agent_fallback_models and ext_agent_tools hold at most %d entries each.", maxAgentListItems)
	case a.Temperature != nil && (*a.Temperature < 0 || *a.Temperature > 2):
		return ojserr.Invalid("ext_agent_temperature", "'ext_agent_temperature' must be from 0.0 to 2.0.")
	case a.ToolChoice != nil && *a.ToolChoice != "auto" && *a.ToolChoice != "required" && *a.ToolChoice != "none":
		return ojserr.Invalid("ext_agent_tool_choice", "'ext_agent_tool_choice' must be auto, required or none.")
	case a.OutputFormat != nil && *a.OutputFormat != "json" && *a.OutputFormat != "text" && *a.OutputFormat != "markdown":
		return ojserr.Invalid("ext_agent_output_format", "'ext_agent_output_format' must be json, text or markdown.")
	}
	for i, t := range a.Tools {
		if name, ok := t["name"].(string); !ok || name == "" {
			return ojserr.Invalid("ext_agent_tools", "Tool %d of 'ext_agent_tools' has no 'name'.", i)
		}
	}
	var maxTokens, budget, depth, maxDepth int
	if err := cmp.Or(setCount(&maxTokens, a.MaxTokens, "ext_agent_max_tokens"), setCount(&budget, a.TokenBudget, AgentTokenBudget),
		setCount(&depth, a.Depth, AgentDepth), setCount(&maxDepth, a.MaxDepth, AgentMaxDepth)); err != nil {
		return err
	}
	if a.TokenBudget != nil {
		j.Extra[AgentTokensUsed] = json.RawMessage("0")
	}
	if a.Depth == nil {
		return nil
	}
	limit := MaxAgentDepth
	if a.MaxDepth != nil {
		limit = min(maxDepth, MaxAgentDepth)
	}
	return checkDepth(depth, limit)
}

// checkDepth refuses a delegation depth past its limit.
func checkDepth(depth, limit int) error {
	if depth <= limit {
		return nil
	}
	return ojserr.Newf(ojserr.AgentMaxDelegationDepth, "The agent task is at delegation depth %d; its chain allows at most %d (ojs-ai-agents.md 3). Do the work in this agent instead of delegating it further.", depth, limit).
		With("field", AgentDepth).With("delegation_depth", depth).With("max_delegation_depth", limit)
}

// Delegate bounds a job an agent delegated by its parent, the job its
// ext_agent_parent_id names (as read): the child's depth is the parent's
// plus one, whatever the child says, and its maximum at most the
// parent's, so that no chain of agents delegates past the maximum its
// first agent was given, or past MaxAgentDepth. A depth past the maximum
// is refused (422 AGENT_MAX_DELEGATION_DEPTH).
func Delegate(child, parent *Job) error {
	pd, pm := agentInt(parent, AgentDepth, 0), agentInt(parent, AgentMaxDepth, MaxAgentDepth)
	depth, limit := pd+1, min(agentInt(child, AgentMaxDepth, pm), pm, MaxAgentDepth)
	if err := checkDepth(depth, limit); err != nil {
		return err
	}
	j, _ := json.Marshal(depth)
	m, _ := json.Marshal(limit)
	child.Extra[AgentDepth], child.Extra[AgentMaxDepth] = j, m
	return nil
}

// agentInt is j's integer attribute name, or def.
func agentInt(j *Job, name string, def int) int {
	var v *int
	if json.Unmarshal(j.Extra[name], &v) != nil || v == nil {
		return def
	}
	return *v
}

// AgentTokens reports j's token budget and the tokens its attempt used as
// last reported (0 before a report); ok is false for a job without a
// budget.
func (j *Job) AgentTokens() (used, budget int64, ok bool) {
	var b *int64
	if json.Unmarshal(j.Extra[AgentTokenBudget], &b) != nil || b == nil {
		return 0, 0, false
	}
	if j.Progress != nil && j.Progress.TokensUsed != nil {
		used = *j.Progress.TokensUsed
	}
	return used, *b, true
}

// AgentParent is the job id j names in ext_agent_parent_id ("": none).
func AgentParent(j *Job) string {
	var id string
	_ = json.Unmarshal(j.Extra[AgentParentID], &id)
	return id
}

func hasPrefix(extra map[string]json.RawMessage, prefix string) bool {
	for k := range extra {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}
