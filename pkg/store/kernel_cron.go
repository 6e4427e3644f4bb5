package store

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// What pkg/cron's persistence needs of the job items: a schedule's fire
// writes its job in the schedule's transaction.

// JobPut is the transaction Put that creates job j, as Create writes it:
// conditional on the job not existing, its index entries set from its
// state (redeliverAfter is when the sweeper re-sends an available
// push-mode job that was not claimed). It fails for a state a job is
// never created in.
func (s *Store) JobPut(j *job.Job, redeliverAfter time.Duration) (*types.Put, error) {
	return s.jobPut(j, redeliverAfter)
}

// JobFinishedCheck is the transaction ConditionCheck that job id is
// finished (completed, cancelled or discarded) or gone.
func (s *Store) JobFinishedCheck(id string) *types.ConditionCheck {
	return &types.ConditionCheck{TableName: &s.table, Key: jobKey(id),
		ConditionExpression:      aws.String("attribute_not_exists(pk) OR #s IN (:c, :x, :d)"),
		ExpressionAttributeNames: map[string]string{"#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": avS(string(job.Completed)), ":x": avS(string(job.Cancelled)),
			":d": avS(string(job.Discarded))}}
}

func avS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
