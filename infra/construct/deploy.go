package ojsconstruct

import (
	"fmt"
	"sort"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscodedeploy"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// AliasName is the alias every function is invoked through: the API
// integration, both event source mappings and the sweeper schedule target
// it, never $LATEST, so a deployment can move traffic to a new version
// gradually (topology.Env.TrafficShift) and roll back by moving it back.
const AliasName = "live"

// deploymentConfigs maps the topology's traffic shifts to CodeDeploy's
// predefined Lambda deployment configurations.
var deploymentConfigs = map[topology.TrafficShift]func() awscodedeploy.ILambdaDeploymentConfig{
	topology.ShiftCanary10Percent5Minutes:    awscodedeploy.LambdaDeploymentConfig_CANARY_10PERCENT_5MINUTES,
	topology.ShiftLinear10PercentEveryMinute: awscodedeploy.LambdaDeploymentConfig_LINEAR_10PERCENT_EVERY_1MINUTE,
}

func sortedShifts() []string {
	out := []string{fmt.Sprintf("%q (all at once)", topology.ShiftAllAtOnce)}
	for s := range deploymentConfigs {
		out = append(out, string(s))
	}
	sort.Strings(out[1:])
	return out
}

// addAliases publishes a version of each function (CurrentVersion: a new
// one whenever the code or configuration changes) and points the "live"
// alias at it.
func (o *OJSServerless) addAliases() {
	for _, name := range topology.FunctionNames {
		fn := o.Functions[name]
		props := &awslambda.AliasProps{
			AliasName:   jsii.String(AliasName),
			Version:     fn.CurrentVersion(),
			Description: jsii.String("What clients, mappings and schedules invoke (" + o.Env.Name + ")"),
		}
		if name == topology.FunctionSweeper {
			// Asynchronous invoke settings are per qualifier: the
			// schedule invokes the alias (see addFunctions).
			props.RetryAttempts = jsii.Number(0)
		}
		o.Aliases[name] = awslambda.NewAlias(o.Construct, jsii.String(pascal(name)+"Alias"), props)
	}
}

// addTrafficShifting puts each alias under a CodeDeploy deployment group
// when the environment shifts traffic gradually: CloudFormation then hands
// the alias update to CodeDeploy, which moves the traffic in steps and
// rolls back when the new version's rollback alarm fires (or the
// deployment fails or is stopped). With ShiftAllAtOnce nothing is created and
// CloudFormation repoints the aliases itself.
func (o *OJSServerless) addTrafficShifting() {
	newConfig, ok := deploymentConfigs[o.Env.TrafficShift]
	if !ok {
		return
	}
	app := awscodedeploy.NewLambdaApplication(o.Construct, jsii.String("Deployments"), &awscodedeploy.LambdaApplicationProps{})
	// One service role for the four groups (each group would otherwise
	// create its own), with the AWS managed policy CodeDeploy documents
	// for Lambda deployments.
	o.DeploymentRole = awsiam.NewRole(o.Construct, jsii.String("DeploymentRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("codedeploy.amazonaws.com"), nil),
		Description: jsii.String("CodeDeploy shifting the OJS functions' live aliases (" + o.Env.Name + ")"),
		ManagedPolicies: &[]awsiam.IManagedPolicy{
			awsiam.ManagedPolicy_FromAwsManagedPolicyName(jsii.String(DeploymentManagedPolicy)),
		},
	})
	for _, name := range topology.FunctionNames {
		o.errorAlarms[name] = o.alarm(pascal(name)+"RollbackAlarm", o.newVersionErrors(name), atLeast, 1,
			"Errors of the new version of the OJS "+name+" function during a deployment (rolls it back)")
		// The alarm follows the new version before the alias moves.
		o.Aliases[name].Node().AddDependency(o.errorAlarms[name])
		o.DeploymentGroups[name] = awscodedeploy.NewLambdaDeploymentGroup(o.Construct, jsii.String(pascal(name)+"Deployment"),
			&awscodedeploy.LambdaDeploymentGroupProps{
				Application:      app,
				Alias:            o.Aliases[name],
				DeploymentConfig: newConfig(),
				Role:             o.DeploymentRole,
				Alarms:           &[]interfacesawscloudwatch.IAlarmRef{o.errorAlarms[name]},
				AutoRollback: &awscodedeploy.AutoRollbackConfig{
					DeploymentInAlarm: jsii.Bool(true),
					FailedDeployment:  jsii.Bool(true),
					StoppedDeployment: jsii.Bool(true),
				},
			})
	}
}

// newVersionErrors is the errors of the version the live alias points at,
// per minute: Lambda reports invocations through an alias under the
// dimensions Resource (<function>:<alias>) and ExecutedVersion, so the
// old version's errors during a canary do not count, and one minute lets
// the alarm fire while the canary runs.
func (o *OJSServerless) newVersionErrors(name string) awscloudwatch.IMetric {
	fn := o.Functions[name].FunctionName()
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String("AWS/Lambda"),
		MetricName: jsii.String("Errors"),
		DimensionsMap: &map[string]*string{
			"FunctionName":    fn,
			"Resource":        awscdk.Fn_Join(jsii.String(":"), &[]*string{fn, jsii.String(AliasName)}),
			"ExecutedVersion": o.Aliases[name].Version().Version(),
		},
		Statistic: jsii.String("Sum"),
		Period:    awscdk.Duration_Minutes(jsii.Number(1)),
	})
}

// DeploymentManagedPolicy is the AWS managed policy of the CodeDeploy role
// (only with a gradual traffic shift): UpdateAlias/GetAlias on functions,
// DescribeAlarms, and invoking hook functions named CodeDeployHook_*.
const DeploymentManagedPolicy = "service-role/AWSCodeDeployRoleForLambdaLimited"
