package ojsconstruct

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscodedeploy"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// APIRoutePath is the HTTP API's catch-all route, for admins: every
// method under /ojs that no route of the api function's table
// (permissions.go) matches goes to the function, which answers it.
const APIRoutePath = "/ojs/{proxy+}"

// StreamStartingPosition is where the stream mapping starts reading.
// TRIM_HORIZON (the oldest record still in the 24 h stream) rather than
// LATEST: the table and mapping are created in one deployment, and LATEST
// would skip every write made between table creation and the mapping
// becoming enabled, or while the mapping was disabled. Replays are harmless
// because every stream consumer is idempotent.
const StreamStartingPosition = awslambda.StartingPosition_TRIM_HORIZON

// OJSServerless is the deployed OJS backend. Its fields expose the created
// resources so embedding stacks can add grants, alarms or outputs.
type OJSServerless struct {
	// Construct is the node every resource lives under. Pass it (not the
	// *OJSServerless) as the scope of constructs you add beside them.
	Construct constructs.Construct

	// Env is the topology the construct was built from.
	Env topology.Env
	// Table is the single DynamoDB table (topology.JobTable).
	Table awsdynamodb.Table
	// Queues maps each push-mode OJS queue name to its SQS queue.
	Queues map[string]awssqs.Queue
	// DeadLetterQueues maps each push-mode OJS queue name to its DLQ.
	DeadLetterQueues map[string]awssqs.Queue
	// StreamFailureQueue receives the metadata of stream batches that
	// still fail after all retries (the mapping's on-failure destination).
	StreamFailureQueue awssqs.Queue
	// PushQueuesJSON is the OJS_PUSH_QUEUES value: a CloudFormation token
	// that resolves to the JSON object {"<ojs queue>": "<sqs queue url>"}.
	PushQueuesJSON *string
	// Functions maps each function name (topology.FunctionAPI, ...) to its
	// Lambda function.
	Functions map[string]awslambda.Function
	// Roles maps each function name to its execution role.
	Roles map[string]awsiam.Role
	// Aliases maps each function name to its "live" alias (AliasName),
	// which everything invokes.
	Aliases map[string]awslambda.Alias
	// DeploymentGroups maps each function name to the CodeDeploy group
	// that shifts its alias (empty with topology.ShiftAllAtOnce), and
	// DeploymentRole is their service role (nil then).
	DeploymentGroups map[string]awscodedeploy.LambdaDeploymentGroup
	DeploymentRole   awsiam.Role
	// EventBus receives OJS lifecycle events from the stream function.
	EventBus awsevents.EventBus
	// HTTPAPI is the API Gateway HTTP API in front of the api function
	// (nil with FrontendFunctionURL).
	HTTPAPI awsapigatewayv2.HttpApi
	// Policies are the managed policies granting each permission level
	// on an IAM-authorised HTTP API (nil on a JWT stage or a function URL).
	Policies map[httpapi.Level]awsiam.ManagedPolicy
	// AccessLogs is the HTTP API stage's access log group (nil with
	// FrontendFunctionURL).
	AccessLogs awslogs.LogGroup
	// FunctionURL is the api function's URL (nil with FrontendHTTPAPI).
	FunctionURL awslambda.FunctionUrl
	// APIURL is the OJS base URL without a trailing slash (clients append
	// /ojs/v1/...), a token resolved at deploy time.
	APIURL *string
	// StreamMapping feeds the table's stream into the stream function.
	StreamMapping awslambda.EventSourceMapping
	// SweeperRule invokes the sweeper every Env.Sweeper.Interval.
	SweeperRule awsevents.Rule
	// Alarms lists every alarm the construct created.
	Alarms []awscloudwatch.Alarm
	// AlarmTopic receives every alarm's ALARM and OK notifications:
	// Props.AlarmTopic, or a topic the construct created.
	AlarmTopic awssns.ITopic
	// Dashboard shows the API, functions, queues and stream.
	Dashboard awscloudwatch.Dashboard

	props       Props
	errorAlarms map[string]awscloudwatch.Alarm
}

// NewOJSServerless adds the OJS backend under scope. It returns an error,
// before creating anything, when props are invalid: no environment,
// settings CloudFormation cannot express (for example a visibility timeout
// that is not whole seconds), or a missing <AssetRoot>/<function>/bootstrap.
func NewOJSServerless(scope constructs.Construct, id string, props *Props) (*OJSServerless, error) {
	props = cmp.Or(props, &Props{})
	p, err := props.withDefaults()
	if err != nil {
		return nil, err
	}
	o := &OJSServerless{
		Construct:        constructs.NewConstruct(scope, jsii.String(id)),
		Env:              p.Env,
		Queues:           map[string]awssqs.Queue{},
		DeadLetterQueues: map[string]awssqs.Queue{},
		Functions:        map[string]awslambda.Function{},
		Roles:            map[string]awsiam.Role{},
		Aliases:          map[string]awslambda.Alias{},
		DeploymentGroups: map[string]awscodedeploy.LambdaDeploymentGroup{},
		props:            p,
		errorAlarms:      map[string]awscloudwatch.Alarm{},
	}
	o.addTable()
	o.addQueues()
	o.EventBus = awsevents.NewEventBus(o.Construct, jsii.String("EventBus"), &awsevents.EventBusProps{
		Description: jsii.String("OJS lifecycle events (" + p.Env.Name + ")"),
	})
	o.addFunctions()
	o.addAliases()
	o.grant()
	o.addMappings()
	o.addAPI()
	o.addSchedule()
	o.addAlarms()
	o.addTrafficShifting()
	o.addDashboard()
	o.addNagSuppressions()
	return o, nil
}

// removalPolicy keeps stateful resources of protected environments when the
// stack is deleted and destroys them everywhere else.
func (o *OJSServerless) removalPolicy() awscdk.RemovalPolicy {
	if o.Env.DeletionProtection {
		return awscdk.RemovalPolicy_RETAIN
	}
	return awscdk.RemovalPolicy_DESTROY
}

// attributeTypes maps the topology's key types to DynamoDB's.
var attributeTypes = map[string]awsdynamodb.AttributeType{"S": awsdynamodb.AttributeType_STRING, "N": awsdynamodb.AttributeType_NUMBER,
	"B": awsdynamodb.AttributeType_BINARY}

// attribute is key k (its type checked by validateTable).
func attribute(k topology.IndexKey) *awsdynamodb.Attribute {
	return &awsdynamodb.Attribute{Name: jsii.String(k.Name), Type: attributeTypes[k.Type]}
}

func (o *OJSServerless) addTable() {
	t := topology.JobTable
	o.Table = awsdynamodb.NewTable(o.Construct, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey:        attribute(t.PartitionKey),
		SortKey:             attribute(t.SortKey),
		Stream:              awsdynamodb.StreamViewType_NEW_AND_OLD_IMAGES,
		TimeToLiveAttribute: jsii.String(t.TTLAttribute),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(o.Env.PointInTimeRecovery),
		},
		DeletionProtection: jsii.Bool(o.Env.DeletionProtection),
		RemovalPolicy:      o.removalPolicy(),
		BillingMode:        o.billingMode(),
		ReadCapacity:       o.minCapacity(func(c *topology.Capacity) int { return c.MinRead }),
		WriteCapacity:      o.minCapacity(func(c *topology.Capacity) int { return c.MinWrite }),
	})
	for _, ix := range t.Indexes {
		props := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      jsii.String(ix.Name),
			PartitionKey:   attribute(ix.PartitionKey),
			SortKey:        attribute(ix.SortKey),
			ProjectionType: awsdynamodb.ProjectionType_ALL,
			ReadCapacity:   o.minCapacity(func(c *topology.Capacity) int { return c.MinRead }),
			WriteCapacity:  o.minCapacity(func(c *topology.Capacity) int { return c.MinWrite }),
		}
		if ix.KeysOnly {
			props.ProjectionType = awsdynamodb.ProjectionType_KEYS_ONLY
		} else if len(ix.Include) > 0 {
			props.ProjectionType, props.NonKeyAttributes = awsdynamodb.ProjectionType_INCLUDE, jsii.Strings(ix.Include...)
		}
		o.Table.AddGlobalSecondaryIndex(props)
	}
	o.autoScale()
}

// billingMode is on-demand unless the environment sets a Capacity.
func (o *OJSServerless) billingMode() awsdynamodb.BillingMode {
	if o.Env.Capacity != nil {
		return awsdynamodb.BillingMode_PROVISIONED
	}
	return awsdynamodb.BillingMode_PAY_PER_REQUEST
}

// minCapacity is a provisioned table's starting capacity (nil on demand).
func (o *OJSServerless) minCapacity(min func(*topology.Capacity) int) *float64 {
	if o.Env.Capacity == nil {
		return nil
	}
	return jsii.Number(min(o.Env.Capacity))
}

// autoScale scales a provisioned table's and every index's read and write
// capacity between the environment's bounds at its target utilisation.
func (o *OJSServerless) autoScale() {
	c := o.Env.Capacity
	if c == nil {
		return
	}
	target := &awsdynamodb.UtilizationScalingProps{TargetUtilizationPercent: jsii.Number(c.TargetPercent)}
	read := &awsdynamodb.EnableScalingProps{MinCapacity: jsii.Number(c.MinRead), MaxCapacity: jsii.Number(c.MaxRead)}
	write := &awsdynamodb.EnableScalingProps{MinCapacity: jsii.Number(c.MinWrite), MaxCapacity: jsii.Number(c.MaxWrite)}
	o.Table.AutoScaleReadCapacity(read).ScaleOnUtilization(target)
	o.Table.AutoScaleWriteCapacity(write).ScaleOnUtilization(target)
	for _, ix := range topology.JobTable.Indexes {
		o.Table.AutoScaleGlobalSecondaryIndexReadCapacity(jsii.String(ix.Name), read).ScaleOnUtilization(target)
		o.Table.AutoScaleGlobalSecondaryIndexWriteCapacity(jsii.String(ix.Name), write).ScaleOnUtilization(target)
	}
}

func seconds(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(d.Seconds()))
}

func tag(c constructs.IConstruct, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		awscdk.Tags_Of(c).Add(jsii.String(kv[i]), jsii.String(kv[i+1]), nil)
	}
}

// queue adds an SQS queue, encrypted with the SQS-managed key and
// reachable over TLS only, tagged with the tag keys and values kv.
func (o *OJSServerless) queue(id string, props awssqs.QueueProps, kv ...string) awssqs.Queue {
	props.Encryption, props.EnforceSSL = awssqs.QueueEncryption_SQS_MANAGED, jsii.Bool(true)
	q := awssqs.NewQueue(o.Construct, jsii.String(id), &props)
	tag(q, kv...)
	return q
}

func (o *OJSServerless) addQueues() {
	urls := map[string]interface{}{}
	for _, q := range o.Env.Queues {
		dlq := o.queue("DeadLetterQueue-"+q.Name, awssqs.QueueProps{RetentionPeriod: seconds(q.DLQRetention)},
			TagQueue, q.Name, TagQueueRole, QueueRoleDeadLetter)
		queue := o.queue("Queue-"+q.Name, awssqs.QueueProps{
			VisibilityTimeout: seconds(q.VisibilityTimeout),
			// Messages are job references (pkg/dispatch); the portable
			// 256 KiB limit, which the local stack enforces too.
			MaxMessageSizeBytes: jsii.Number(awslimit.SQSMessageBytes),
			DeadLetterQueue:     &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(q.MaxReceiveCount)},
		}, TagQueue, q.Name, TagQueueRole, QueueRolePush)
		o.Queues[q.Name] = queue
		o.DeadLetterQueues[q.Name] = dlq
		urls[q.Name] = queue.QueueUrl()
	}
	// Stack.ToJsonString renders tokens (queue URLs are only known at
	// deploy time) as an Fn::Join that CloudFormation resolves to JSON.
	o.PushQueuesJSON = awscdk.Stack_Of(o.Construct).ToJsonString(urls, nil)

	o.StreamFailureQueue = o.queue("StreamFailureQueue", awssqs.QueueProps{RetentionPeriod: awscdk.Duration_Days(jsii.Number(14))},
		TagQueueRole, QueueRoleStreamFailure)
}

// durationText is d as a Go duration, "" for none.
func durationText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

func (o *OJSServerless) addFunctions() {
	p := o.props
	retention, _ := retentionDays(o.Env.LogRetentionDays) // checked in validate
	tracing := awslambda.Tracing_DISABLED
	if o.Env.Tracing {
		tracing = awslambda.Tracing_ACTIVE
	}
	for _, name := range topology.FunctionNames {
		size := o.Env.Functions[name]
		id := pascal(name) + "Function"
		env := map[string]*string{
			topology.EnvTable:      o.Table.TableName(),
			topology.EnvPushQueues: o.PushQueuesJSON,
			topology.EnvLogLevel:   jsii.String(p.LogLevel),
			// Read where jobs finish and where workflows are created.
			topology.EnvResultTTL: jsii.String(strconv.FormatInt(*p.ResultTTL, 10)),
		}
		// The optional settings, set where not empty.
		opt := map[string]string{}
		if o.Env.PlainPayloads {
			opt[topology.EnvPlainPayloads] = "true"
		}
		if len(p.QueueResultTTLs) > 0 {
			b, _ := json.Marshal(p.QueueResultTTLs)
			opt[topology.EnvQueueResultTTL] = string(b)
		}
		switch name {
		case topology.FunctionAPI:
			maps.Copy(opt, map[string]string{topology.EnvAuthToken: p.AuthToken, topology.EnvEnqueueMeta: o.Env.EnqueueMeta, topology.EnvTenantClaim: p.JWT.Claim(),
				topology.EnvFederationRegion: o.Env.FederationRegion, topology.EnvFetchWait: durationText(o.Env.FetchWait)})
		case topology.FunctionStream:
			// Only the stream function publishes events; the others leave
			// the variable unset, which disables publishing. OJS_ENV is
			// the Environment dimension of the lifecycle metrics.
			env[topology.EnvEventBus] = o.EventBus.EventBusName()
			maps.Copy(opt, map[string]string{topology.EnvEventTTL: o.Env.EventTTL.String(), topology.EnvPublishEvents: o.Env.PublishEvents,
				topology.EnvPublishPacked: o.Env.PublishPacked, topology.EnvName: o.Env.Name, topology.EnvWebhookRefresh: durationText(o.Env.WebhookRefresh)})
		case topology.FunctionSweeper:
			opt[topology.EnvSweepTick] = durationText(o.Env.Sweeper.Tick)
		}
		for k, v := range opt {
			if v != "" {
				env[k] = jsii.String(v)
			}
		}
		// Our own role without managed policies: the default
		// AWSLambdaBasicExecutionRole would allow logs:* on "*".
		role := awsiam.NewRole(o.Construct, jsii.String(id+"Role"), &awsiam.RoleProps{
			AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
			Description: jsii.String(fmt.Sprintf("OJS %s function (%s)", name, o.Env.Name)),
		})
		logs := awslogs.NewLogGroup(o.Construct, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
			Retention:     retention,
			RemovalPolicy: o.removalPolicy(),
		})
		fprops := &awslambda.FunctionProps{
			Description:  jsii.String(fmt.Sprintf("OJS %s (%s)", name, o.Env.Name)),
			Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
			Architecture: p.Architecture,
			Handler:      jsii.String(BootstrapName),
			Code:         awslambda.Code_FromAsset(jsii.String(filepath.Join(p.AssetRoot, name)), nil),
			MemorySize:   jsii.Number(size.MemoryMB),
			Timeout:      seconds(size.Timeout),
			Environment:  &env,
			Role:         role,
			LogGroup:     logs,
			Tracing:      tracing,
			// JSON logs filtered by level at the source: Lambda's own
			// START, END and REPORT lines are INFO and not written, and
			// the functions' lines below OJS_LOG_LEVEL are dropped by
			// Lambda too (slog writes the "level" Lambda reads).
			LoggingFormat:         awslambda.LoggingFormat_JSON,
			SystemLogLevelV2:      awslambda.SystemLogLevel_WARN,
			ApplicationLogLevelV2: logLevels[p.LogLevel],
		}
		if size.ReservedConcurrency > 0 {
			fprops.ReservedConcurrentExecutions = jsii.Number(size.ReservedConcurrency)
		}
		if name == topology.FunctionSweeper {
			// A failed sweep is redone by the next tick; Lambda's two
			// asynchronous retries would only overlap with it.
			fprops.RetryAttempts = jsii.Number(0)
		}
		fn := awslambda.NewFunction(o.Construct, jsii.String(id), fprops)
		logs.GrantWrite(role)
		tag(fn, TagFunction, name)
		tag(role, TagFunction, name)
		o.Functions[name] = fn
		o.Roles[name] = role
	}
}

// TableActions are the DynamoDB actions every function gets on the table
// and its indexes. Table.GrantReadWriteData would add stream-reading actions
// too; transactions need no action of their own (TransactWriteItems is
// authorised per contained Put/Update/Delete/ConditionCheck).
var TableActions = []string{
	"dynamodb:BatchGetItem",
	"dynamodb:BatchWriteItem",
	"dynamodb:ConditionCheckItem",
	"dynamodb:DeleteItem",
	"dynamodb:DescribeTable",
	"dynamodb:GetItem",
	"dynamodb:PutItem",
	"dynamodb:Query",
	"dynamodb:Scan",
	"dynamodb:UpdateItem",
}

// grant gives each function exactly what it uses (see docs/infrastructure.md).
func (o *OJSServerless) grant() {
	for _, name := range topology.FunctionNames {
		o.Table.Grant(o.Functions[name], *jsii.Strings(TableActions...)...)
	}
	for _, name := range []string{topology.FunctionWorker, topology.FunctionStream, topology.FunctionSweeper} {
		for _, q := range o.Env.Queues {
			o.Queues[q.Name].GrantSendMessages(o.Functions[name])
		}
	}
	stream := o.Functions[topology.FunctionStream]
	o.EventBus.GrantPutEventsTo(stream, nil)
	// Table.GrantStreamRead would add dynamodb:ListStreams on "*"; IAM
	// accepts this table's stream ARNs for ListStreams, so scope it.
	o.Table.GrantStream(stream, *jsii.Strings("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")...)
	awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee: stream,
		Actions: jsii.Strings("dynamodb:ListStreams"),
		ResourceArns: &[]*string{
			awscdk.Fn_Join(jsii.String(""), &[]*string{o.Table.TableArn(), jsii.String("/stream/*")}),
		},
	})
}

func (o *OJSServerless) addMappings() {
	worker := o.Aliases[topology.FunctionWorker]
	for _, q := range o.Env.Queues {
		// SqsEventSource also grants the worker ReceiveMessage,
		// DeleteMessage, ChangeMessageVisibility and GetQueueAttributes on
		// this queue only.
		worker.AddEventSource(awslambdaeventsources.NewSqsEventSource(o.Queues[q.Name], &awslambdaeventsources.SqsEventSourceProps{
			BatchSize:               jsii.Number(q.BatchSize),
			MaxBatchingWindow:       seconds(q.MaxBatchingWindow),
			ReportBatchItemFailures: jsii.Bool(true),
			MaxConcurrency:          jsii.Number(q.MaxConcurrency),
		}))
	}
	s := o.Env.Stream
	// A plain EventSourceMapping rather than DynamoEventSource, whose bind
	// grants dynamodb:ListStreams on "*" (see grant).
	o.StreamMapping = awslambda.NewEventSourceMapping(o.Construct, jsii.String("StreamMapping"), &awslambda.EventSourceMappingProps{
		Target:                  o.Aliases[topology.FunctionStream],
		EventSourceArn:          o.Table.TableStreamArn(),
		StartingPosition:        StreamStartingPosition,
		BatchSize:               jsii.Number(s.BatchSize),
		MaxBatchingWindow:       seconds(s.MaxBatchingWindow),
		BisectBatchOnError:      jsii.Bool(s.BisectOnError),
		RetryAttempts:           jsii.Number(s.MaxRetries),
		MaxRecordAge:            seconds(s.MaxRecordAge),
		ReportBatchItemFailures: jsii.Bool(true),
		// Only job items and workflow nodes reach the function (event
		// items and counter shards would only cost invocations).
		Filters: &[]*map[string]interface{}{{"pattern": jsii.String(s.Filter.Pattern())}},
		// SqsDlq.bind grants the stream function SendMessage on this queue.
		OnFailure: awslambdaeventsources.NewSqsDlq(o.StreamFailureQueue),
	})
}

func (o *OJSServerless) addAPI() {
	if o.props.Frontend == FrontendFunctionURL {
		o.FunctionURL = o.Aliases[topology.FunctionAPI].AddFunctionUrl(&awslambda.FunctionUrlOptions{
			AuthType: awslambda.FunctionUrlAuthType_NONE,
		})
		// The URL ends in "/": rebuild it as <scheme>//<host>.
		parts := awscdk.Fn_Split(jsii.String("/"), o.FunctionURL.Url(), nil)
		o.APIURL = awscdk.Fn_Join(jsii.String(""), &[]*string{
			awscdk.Fn_Select(jsii.Number(0), parts), jsii.String("//"), awscdk.Fn_Select(jsii.Number(2), parts),
		})
		return
	}
	var auth awsapigatewayv2.IHttpRouteAuthorizer
	if j := o.props.JWT; j != nil {
		auth = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(j.Issuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{JwtAudience: jsii.Strings(j.Audience...)})
	} else {
		auth = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	}
	o.HTTPAPI = awsapigatewayv2.NewHttpApi(o.Construct, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(o.Env.Prefix),
		Description:        jsii.String("OJS HTTP binding (" + o.Env.Name + ")"),
		CreateDefaultStage: jsii.Bool(true),
		DefaultAuthorizer:  auth,
	})
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("ApiIntegration"),
		o.Aliases[topology.FunctionAPI],
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
			PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
			// One permission for the whole API: one per route would pass
			// Lambda's 20 KB resource policy limit.
			ScopePermissionToRoute: jsii.Bool(false),
		})
	o.addRoutes(integration)
	o.APIURL = o.HTTPAPI.ApiEndpoint()
	o.configureStage()
}

func (o *OJSServerless) addSchedule() {
	minutes := o.Env.Sweeper.Interval / time.Minute // whole minutes, checked in validate
	o.SweeperRule = awsevents.NewRule(o.Construct, jsii.String("SweeperSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Runs the OJS sweeper (" + o.Env.Name + ")"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(float64(minutes)))),
		Targets: &[]awsevents.IRuleTarget{
			awseventstargets.NewLambdaFunction(o.Aliases[topology.FunctionSweeper], nil),
		},
	})
}
