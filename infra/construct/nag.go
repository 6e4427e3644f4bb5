package ojsconstruct

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// NagChecks returns cdk-nag's AwsSolutions rule pack as an aspect: add it
// to the app (awscdk.Aspects_Of(app).Add) and synthesis reports every
// departure from the rules that the construct has not justified; errors
// fail `cdk synth`. reports writes cdk-nag's CSV report per stack into the
// cloud assembly directory.
func NagChecks(reports bool) awscdk.IAspect {
	return cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true), Reports: &reports})
}

// suppress records why c (and its children, such as a role's default
// policy) departs from rule; appliesTo narrows it to the listed findings
// of a granular rule (a string or a cdknag.RegexAppliesTo each).
func suppress(c constructs.IConstruct, rule, reason string, appliesTo ...any) {
	s := &cdknag.NagPackSuppression{Id: jsii.String(rule), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		s.AppliesTo = &appliesTo
	}
	cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{s}, jsii.Bool(true))
}

func regex(re string) *cdknag.RegexAppliesTo { return &cdknag.RegexAppliesTo{Regex: jsii.String(re)} }

// addNagSuppressions records, on the resources concerned, why the stack
// departs from cdk-nag's AwsSolutions rules. Each reason is the decision
// documented in docs/infrastructure.md; nothing is suppressed stack-wide.
func (o *OJSServerless) addNagSuppressions() {
	for _, name := range topology.FunctionNames {
		role := o.Roles[name]
		suppress(role, "AwsSolutions-IAM5",
			"The table's indexes: every function queries the GSIs (ready, due, events) of the one job table; "+
				"<table>/index/* names exactly this table's indexes, no other table's.",
			regex(`/^Resource::<[A-Za-z0-9]*Table[A-Za-z0-9]*\.Arn>\/index\/\*$/g`))
		if o.Env.Tracing {
			suppress(role, "AwsSolutions-IAM5",
				"X-Ray active tracing: xray:PutTraceSegments and xray:PutTelemetryRecords support no resource-level "+
					"permissions, so Resource must be \"*\" (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsx-ray.html).",
				"Resource::*")
		}
	}
	suppress(o.Roles[topology.FunctionStream], "AwsSolutions-IAM5",
		"dynamodb:ListStreams scoped to this table's streams (<table>/stream/*) instead of \"*\", which "+
			"DynamoEventSource would grant; the stream label is only known after deployment.",
		regex(`/^Resource::<[A-Za-z0-9]*Table[A-Za-z0-9]*\.Arn>\/stream\/\*$/g`))
	suppress(o.StreamFailureQueue, "AwsSolutions-SQS3",
		"This queue is itself a dead-letter destination: the on-failure destination of the DynamoDB Streams "+
			"mapping (it receives the metadata of batches that failed every retry). cdk-nag only recognises "+
			"queues named in another queue's redrive policy.")
	if !o.Env.PointInTimeRecovery {
		suppress(o.Table, "AwsSolutions-DDB3",
			"Point-in-time recovery is a per-environment decision in pkg/topology: on in prod, off in "+
				"dev/staging/local, whose data is disposable test data.")
	}
	if o.DeploymentRole != nil {
		suppress(o.DeploymentRole, "AwsSolutions-IAM4",
			"CodeDeploy's documented service role policy for Lambda deployments (AWSCodeDeployRoleForLambdaLimited): "+
				"UpdateAlias/GetAlias and DescribeAlarms, and invoking only hook functions named CodeDeployHook_*; "+
				"the role is assumable by codedeploy.amazonaws.com only.",
			"Policy::arn:<AWS::Partition>:iam::aws:policy/"+DeploymentManagedPolicy)
	}
}
