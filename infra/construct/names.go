package ojsconstruct

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
)

// Tag keys the construct puts on its queues and functions. Operators use
// them to find resources; the tests use them to match template resources
// with topology entries.
const (
	// TagQueue carries the OJS queue name on its SQS queue and DLQ.
	TagQueue = "ojs:queue"
	// TagQueueRole is "push" on a push queue, "dead-letter" on its DLQ and
	// "stream-failure" on the Streams on-failure queue.
	TagQueueRole = "ojs:queue-role"
	// TagFunction carries the function name (api, worker, stream, sweeper).
	TagFunction = "ojs:function"
)

// Values of TagQueueRole.
const (
	QueueRolePush          = "push"
	QueueRoleDeadLetter    = "dead-letter"
	QueueRoleStreamFailure = "stream-failure"
)

// pascal turns an OJS queue or function name into an identifier fragment:
// "email.high-prio" becomes "EmailHighPrio".
func pascal(name string) string {
	var b strings.Builder
	for _, w := range strings.FieldsFunc(name, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// retentionByDays lists the retention periods CloudWatch Logs accepts.
var retentionByDays = map[int]awslogs.RetentionDays{
	1:    awslogs.RetentionDays_ONE_DAY,
	3:    awslogs.RetentionDays_THREE_DAYS,
	5:    awslogs.RetentionDays_FIVE_DAYS,
	7:    awslogs.RetentionDays_ONE_WEEK,
	14:   awslogs.RetentionDays_TWO_WEEKS,
	30:   awslogs.RetentionDays_ONE_MONTH,
	60:   awslogs.RetentionDays_TWO_MONTHS,
	90:   awslogs.RetentionDays_THREE_MONTHS,
	120:  awslogs.RetentionDays_FOUR_MONTHS,
	150:  awslogs.RetentionDays_FIVE_MONTHS,
	180:  awslogs.RetentionDays_SIX_MONTHS,
	365:  awslogs.RetentionDays_ONE_YEAR,
	400:  awslogs.RetentionDays_THIRTEEN_MONTHS,
	545:  awslogs.RetentionDays_EIGHTEEN_MONTHS,
	731:  awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS,
	1827: awslogs.RetentionDays_FIVE_YEARS,
	2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS,
	2922: awslogs.RetentionDays_EIGHT_YEARS,
	3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

// retentionDays maps a topology retention in days to the CloudWatch value.
func retentionDays(days int) (awslogs.RetentionDays, error) {
	r, ok := retentionByDays[days]
	if !ok {
		return "", fmt.Errorf("ojsconstruct: log retention of %d days is not a CloudWatch Logs retention period", days)
	}
	return r, nil
}
