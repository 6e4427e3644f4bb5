package ojsconstruct

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// configureStage gives the HTTP API's $default stage its throttling
// (topology.Env.API) and access logs. The L2 HttpApi creates the stage;
// its CfnStage is adjusted here because the L2 access log settings take a
// jsii interface a Go struct cannot implement.
func (o *OJSServerless) configureStage() {
	retention, _ := retentionDays(o.Env.LogRetentionDays) // checked in validate
	o.AccessLogs = awslogs.NewLogGroup(o.Construct, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     retention,
		RemovalPolicy: o.removalPolicy(),
	})
	format, _ := json.Marshal(topology.AccessLogFormat) // a map of strings
	stage := o.HTTPAPI.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: o.AccessLogs.LogGroupArn(),
		Format:         jsii.String(string(format)),
	})
	if api := o.Env.API; api.ThrottleRate > 0 || api.ThrottleBurst > 0 {
		stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
			ThrottlingRateLimit:  jsii.Number(api.ThrottleRate),
			ThrottlingBurstLimit: jsii.Number(api.ThrottleBurst),
		})
	}
}
