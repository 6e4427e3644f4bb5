package job_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// The AI agent extension's attributes are kept as sent, checked for their
// types and ranges (a 400 naming the attribute), and the system-managed
// ones are the server's: a budget starts at 0 tokens used, whatever the
// client sent.
func TestAgentAttributes(t *testing.T) {
	e, err := job.ParseEnqueue([]byte(`{"type":"ai.agent.chat","args":[],"ext_agent_model":"gpt-4","ext_agent_temperature":0.7,
		"ext_agent_max_tokens":2048,"ext_agent_token_budget":10000,"ext_agent_tokens_used":9999,"ext_agent_tool_results":[1],
		"ext_agent_tools":[{"name":"get_weather"}],"ext_agent_tool_choice":"auto","ext_agent_output_format":"json",
		"ext_agent_output_schema":{"type":"object"},"ext_agent_fallback_models":["a","b"],"ext_agent_delegation_depth":2,"ext_agent_max_delegation_depth":5}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	x := e.Job.Extra
	if string(x["ext_agent_tokens_used"]) != "0" || x["ext_agent_tool_results"] != nil || string(x["ext_agent_model"]) != `"gpt-4"` {
		t.Fatalf("extra: %s", must(json.Marshal(x)))
	}
	for _, c := range []struct{ body, field string }{
		{`"ext_agent_temperature":2.5`, "ext_agent_temperature"},
		{`"ext_agent_max_tokens":"lots"`, "ext_agent"},
		{`"ext_agent_token_budget":-1`, "ext_agent_token_budget"},
		{`"ext_agent_tool_choice":"sometimes"`, "ext_agent_tool_choice"},
		{`"ext_agent_output_format":"xml"`, "ext_agent_output_format"},
		{`"ext_agent_tools":[{"description":"no name"}]`, "ext_agent_tools"},
		{`"ext_agent_model":""`, "ext_agent_model"},
		{`"ext_agent_delegation_depth":1.5`, "ext_agent_delegation_depth"},
	} {
		_, err := job.ParseEnqueue([]byte(`{"type":"a.b","args":[],`+c.body+`}`), time.Now())
		oe, ok := err.(*ojserr.Error)
		if !ok || oe.Status() != 400 || !strings.HasPrefix(oe.Details["field"].(string), c.field) {
			t.Errorf("%s: %v", c.body, err)
		}
	}
}

// A delegation past its maximum (or past 10) is refused with 422
// AGENT_MAX_DELEGATION_DEPTH; a job delegated by a known parent takes the
// parent's depth plus one and at most its maximum, whatever it says.
func TestAgentDelegation(t *testing.T) {
	parse := func(body string) (*job.Job, error) {
		e, err := job.ParseEnqueue([]byte(`{"type":"ai.agent.delegate","args":[],`+body+`}`), time.Now())
		if err != nil {
			return nil, err
		}
		return e.Job, nil
	}
	depthErr := func(err error) bool {
		oe, ok := err.(*ojserr.Error)
		if !ok {
			return false
		}
		code, _ := oe.Wire()
		return oe.Status() == 422 && code == "AGENT_MAX_DELEGATION_DEPTH"
	}
	if _, err := parse(`"ext_agent_delegation_depth":6,"ext_agent_max_delegation_depth":5`); !depthErr(err) {
		t.Fatalf("deeper than its maximum: %v", err)
	}
	if _, err := parse(`"ext_agent_delegation_depth":11`); !depthErr(err) {
		t.Fatalf("deeper than 10: %v", err)
	}
	parent, err := parse(`"ext_agent_delegation_depth":2,"ext_agent_max_delegation_depth":3`)
	if err != nil {
		t.Fatal(err)
	}
	// The child claims depth 0 and a maximum of 9: it is at 3, bounded by 3.
	child, err := parse(`"ext_agent_parent_id":"p","ext_agent_delegation_depth":0,"ext_agent_max_delegation_depth":9`)
	if err != nil {
		t.Fatal(err)
	}
	if job.AgentParent(child) != "p" {
		t.Fatalf("parent: %q", job.AgentParent(child))
	}
	if err := job.Delegate(child, parent); err != nil || string(child.Extra["ext_agent_delegation_depth"]) != "3" || string(child.Extra["ext_agent_max_delegation_depth"]) != "3" {
		t.Fatalf("delegated: %v depth %s max %s", err, child.Extra["ext_agent_delegation_depth"], child.Extra["ext_agent_max_delegation_depth"])
	}
	// Its own child would be at 4, past the chain's 3.
	grandchild, _ := parse(`"ext_agent_parent_id":"c"`)
	if err := job.Delegate(grandchild, child); !depthErr(err) {
		t.Fatalf("past the chain's maximum: %v", err)
	}
	// A parent that names no depth is at 0, with the limit of 10.
	plain, _ := parse(`"ext_agent_model":"m"`)
	if err := job.Delegate(grandchild, plain); err != nil || string(grandchild.Extra["ext_agent_delegation_depth"]) != "1" || string(grandchild.Extra["ext_agent_max_delegation_depth"]) != "10" {
		t.Fatalf("under a plain parent: %v %s %s", err, grandchild.Extra["ext_agent_delegation_depth"], grandchild.Extra["ext_agent_max_delegation_depth"])
	}
}

func must(b []byte, _ error) string { return string(b) }
