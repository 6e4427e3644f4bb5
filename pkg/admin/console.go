package admin

import (
	"context"
	"slices"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/events"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
)

// WorkflowRef is a workflow the event log saw created.
type WorkflowRef struct {
	ID, Type, Name, CreatedAt string
}

// MaxRecentWorkflows bounds RecentWorkflows.
const MaxRecentWorkflows = 50

// RecentWorkflows lists the workflows created in the last day, newest
// first (at most MaxRecentWorkflows; reads at most MaxQueryCalls pages of
// workflow.created events).
func (s *Service) RecentWorkflows(ctx context.Context) ([]WorkflowRef, error) {
	now := s.now()
	f := events.Filter{Types: []string{events.WorkflowCreated}, Since: now.Add(-24 * time.Hour), Limit: events.MaxLimit}
	var all []WorkflowRef
	for range MaxQueryCalls {
		p, err := s.queryEvents(ctx, f, now)
		if err != nil {
			return nil, ojserr.Backend(err)
		}
		for _, e := range p.Events {
			id, _ := e.Data["workflow_id"].(string)
			typ, _ := e.Data["workflow_type"].(string)
			name, _ := e.Data["workflow_name"].(string)
			all = append(all, WorkflowRef{ID: id, Type: typ, Name: name, CreatedAt: e.Time})
		}
		if !p.HasMore {
			break
		}
		f.After = p.Cursor
	}
	slices.Reverse(all)
	return append([]WorkflowRef{}, all[:min(len(all), MaxRecentWorkflows)]...), nil
}

// DeleteDead deletes a dead letter job for good.
func (s *Service) DeleteDead(ctx context.Context, id string) error { return s.dead.Delete(ctx, id) }
