package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// accessLogValues are typical values of the access log's context variables
// for a worker's request signed with IAM (the longest common case);
// accessLogEmpty are the variables a successful request leaves empty ("-").
// Every variable of topology.AccessLogFormat is in one of the two.
var (
	accessLogValues = map[string]string{
		"$context.requestId":              "K8mBkj2ZoAMEVhA=",
		"$context.awsEndpointRequestId":   "0f3c6a2e-8b1d-4c7e-9a55-3e2f1b6d7c90",
		"$context.requestTime":            "28/Nov/2026:19:45:12 +0000",
		"$context.identity.sourceIp":      "203.0.113.24",
		"$context.identity.userAgent":     "ojs-go-sdk/0.4.0 (go1.26.8)",
		"$context.httpMethod":             "POST",
		"$context.path":                   "/ojs/v1/workers/fetch",
		"$context.routeKey":               "ANY /ojs/{proxy+}",
		"$context.protocol":               "HTTP/1.1",
		"$context.status":                 "200",
		"$context.responseLength":         "1432",
		"$context.responseLatency":        "23",
		"$context.integrationStatus":      "200",
		"$context.integrationLatency":     "21",
		"$context.identity.userArn":       "arn:aws:sts::123456789012:assumed-role/ojs-worker/i-0abc123def4567890",
		"$context.identity.accountId":     "123456789012",
		"$context.identity.caller":        "AROAEXAMPLEROLEID:i-0abc123def4567890",
		"$context.identity.user":          "AROAEXAMPLEROLEID:i-0abc123def4567890",
		"$context.authorizer.principalId": "-",
	}
	accessLogEmpty = map[string]bool{
		"$context.integrationErrorMessage": true, "$context.error.message": true, "$context.authorizer.error": true,
		"$context.authorizer.claims.sub": true, "$context.authorizer.claims.client_id": true,
	}
	contextVar = regexp.MustCompile(`\$context\.[A-Za-z_.]+`)
)

// AccessLogLineBytes is the size of one access log line with typical
// values, as CloudWatch Logs bills it (the line and 26 bytes of event
// overhead).
func AccessLogLineBytes() int {
	line := map[string]string{}
	for k, v := range topology.AccessLogFormat {
		line[k] = contextVar.ReplaceAllStringFunc(v, func(name string) string {
			if s, ok := accessLogValues[name]; ok {
				return s
			}
			return "-"
		})
	}
	b, _ := json.Marshal(line)
	return len(b) + 26
}

// footprint is what the stack has kept so far: each engine function's log
// bytes (at topology.DefaultLogLevel) and the table's stored bytes.
type footprint struct {
	logs   map[string]int64
	stored int64
}

// footprint reads the function logs' sizes and the table's size (DynamoDB
// Local reports it at once; AWS every six hours) with the overhead
// DynamoDB bills for each item and index entry.
func (b *bencher) footprint(ctx context.Context) (footprint, error) {
	f := footprint{logs: map[string]int64{}}
	for _, fn := range EngineFunctions {
		if st, err := os.Stat(filepath.Join(b.o.LogDir, fn+".log")); err == nil {
			f.logs[fn] = st.Size()
		}
	}
	out, err := b.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(b.table)})
	if err != nil {
		return f, err
	}
	t := out.Table
	f.stored = aws.ToInt64(t.TableSizeBytes) + ItemOverheadBytes*aws.ToInt64(t.ItemCount)
	for _, ix := range t.GlobalSecondaryIndexes {
		f.stored += aws.ToInt64(ix.IndexSizeBytes) + ItemOverheadBytes*aws.ToInt64(ix.ItemCount)
	}
	return f, nil
}

// Idle is what a deployed stack costs a month with no work: the sweeper's
// ticks and the SQS event source mappings' empty long polls.
type Idle struct {
	SweeperUSD float64 `json:"sweeper_usd"`
	PollsUSD   float64 `json:"sqs_polls_usd"`
	USD        float64 `json:"usd_per_month"`
	Note       string  `json:"note"`
}

// idlePollers and idlePollsPerMinute: Lambda keeps five pollers on each
// SQS event source mapping, each a 20-second long poll.
const (
	idlePollers        = 5
	idlePollsPerMinute = 3
)

// IdleCost prices a month of an idle stack with env's push-mode queues.
func IdleCost(s Sweeper, env topology.Env) Idle {
	polls := float64(len(env.Queues)*idlePollers*idlePollsPerMinute) * 60 * 24 * 30
	i := Idle{SweeperUSD: s.USDPerMonthOnAWS, PollsUSD: round(polls*USEast1.SQSRequest, 3),
		Note: "alarms ($0.10 each a month), the dashboard ($3) and log storage are fixed prices of CloudWatch, not counted here"}
	i.USD = round(i.SweeperUSD+i.PollsUSD, 3)
	return i
}
