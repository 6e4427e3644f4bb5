package ojsconstruct

import (
	"cmp"
	"fmt"
	"regexp"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// ConstructID is the id NewStack gives the OJSServerless construct.
const ConstructID = "Ojs"

// Stack output keys (the keys of `cdk deploy --outputs-file`).
const (
	// OutputAPIURL is the OJS base URL without a trailing slash, e.g.
	// https://abc123.execute-api.eu-west-1.amazonaws.com (or the function
	// URL's origin with FrontendFunctionURL); clients append
	// /ojs/v1/... (the OJS_BASE_URL convention of the e2e suite).
	OutputAPIURL = "ApiUrl"
	// OutputAPIV1URL is OutputAPIURL + "/ojs/v1".
	OutputAPIV1URL = "ApiV1Url"
	// OutputTableName is the DynamoDB table name (OJS_TABLE).
	OutputTableName = "TableName"
	// OutputEventBusName is the EventBridge bus name (OJS_EVENT_BUS).
	OutputEventBusName = "EventBusName"
	// OutputPushQueues is the OJS_PUSH_QUEUES JSON.
	OutputPushQueues = "PushQueues"
	// OutputStreamFailureQueueURL is the URL of the stream on-failure queue.
	OutputStreamFailureQueueURL = "StreamFailureQueueUrl"
	// OutputDashboardName is the CloudWatch dashboard name.
	OutputDashboardName = "DashboardName"
	// OutputAlarmTopicARN is the SNS topic every alarm notifies (subscribe
	// your on-call email or tooling to it).
	OutputAlarmTopicARN = "AlarmTopicArn"
)

// QueueURLOutput returns the output key holding the SQS URL of the named
// push-mode OJS queue, e.g. "LambdaQueueUrl" for queue "lambda".
func QueueURLOutput(queue string) string { return pascal(queue) + "QueueUrl" }

// DeadLetterQueueURLOutput returns the output key holding the URL of the
// named queue's dead-letter queue, e.g. "LambdaDeadLetterQueueUrl".
func DeadLetterQueueURLOutput(queue string) string { return pascal(queue) + "DeadLetterQueueUrl" }

// StackName returns the CloudFormation stack name of an environment:
// "OjsServerless-<env>".
func StackName(env string) string { return "OjsServerless-" + env }

// StackProps configures NewStack.
type StackProps struct {
	awscdk.StackProps
	// OJS configures the backend construct; see Props.
	OJS Props
	// AlarmTopicARN, when set and OJS.AlarmTopic is nil, is an existing SNS
	// topic (e.g. the environment's on-call topic) imported as the alarm
	// topic. Default: the construct creates one.
	AlarmTopicARN string
}

var topicARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$`)

// NewStack creates a stack holding one OJSServerless construct (id
// ConstructID) and the stack outputs listed above. StackName defaults to
// StackName(OJS.Env.Name). It returns an error, without adding anything to
// scope, when the construct props are invalid.
func NewStack(scope constructs.Construct, id string, props *StackProps) (awscdk.Stack, *OJSServerless, error) {
	props = cmp.Or(props, &StackProps{})
	if _, err := props.OJS.withDefaults(); err != nil {
		return nil, nil, err
	}
	if a := props.AlarmTopicARN; a != "" && !topicARNPattern.MatchString(a) {
		return nil, nil, fmt.Errorf("ojsconstruct: alarm topic %q is not an SNS topic ARN", a)
	}
	sp := props.StackProps
	sp.StackName = cmp.Or(sp.StackName, jsii.String(StackName(props.OJS.Env.Name)))
	sp.Description = cmp.Or(sp.Description, jsii.String("Open Job Spec serverless backend ("+props.OJS.Env.Name+")"))
	stack := awscdk.NewStack(scope, jsii.String(id), &sp)
	tag(stack, "ojs:env", props.OJS.Env.Name, "project", "ojs-serverless")

	ojsProps := props.OJS
	if ojsProps.AlarmTopic == nil && props.AlarmTopicARN != "" {
		ojsProps.AlarmTopic = awssns.Topic_FromTopicArn(stack, jsii.String("AlarmTopic"), jsii.String(props.AlarmTopicARN))
	}
	o, err := NewOJSServerless(stack, ConstructID, &ojsProps)
	if err != nil {
		return nil, nil, err
	}
	out := func(key string, value *string, desc string) {
		awscdk.NewCfnOutput(stack, jsii.String(key), &awscdk.CfnOutputProps{
			Value:       value,
			Description: jsii.String(desc),
		})
	}
	out(OutputAPIURL, o.APIURL, "OJS base URL (append /ojs/v1/...); the e2e suite's OJS_BASE_URL")
	out(OutputAPIV1URL, awscdk.Fn_Join(jsii.String(""), &[]*string{o.APIURL, jsii.String("/ojs/v1")}),
		"OJS v1 API root")
	out(OutputTableName, o.Table.TableName(), "DynamoDB table (OJS_TABLE)")
	out(OutputEventBusName, o.EventBus.EventBusName(), "EventBridge bus for OJS events (OJS_EVENT_BUS)")
	out(OutputPushQueues, o.PushQueuesJSON, "Push-mode queues (OJS_PUSH_QUEUES)")
	for _, q := range o.Env.Queues {
		out(QueueURLOutput(q.Name), o.Queues[q.Name].QueueUrl(), "SQS queue of OJS queue "+q.Name)
		out(DeadLetterQueueURLOutput(q.Name), o.DeadLetterQueues[q.Name].QueueUrl(), "Dead-letter queue of OJS queue "+q.Name)
	}
	out(OutputStreamFailureQueueURL, o.StreamFailureQueue.QueueUrl(), "On-failure destination of the stream mapping")
	out(OutputDashboardName, o.Dashboard.DashboardName(), "CloudWatch dashboard")
	out(OutputAlarmTopicARN, o.AlarmTopic.TopicArn(), "SNS topic of every alarm (ALARM and OK)")
	return stack, o, nil
}
