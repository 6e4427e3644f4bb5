package ojsconstruct

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/httpapi"
)

// PolicyOutput returns the stack output key holding the ARN of a level's
// managed policy on an IAM-authorised stage ("ProducerPolicyArn").
func PolicyOutput(lv httpapi.Level) string { return pascal(string(lv)) + "PolicyArn" }

// InvokePath is the request path an execute-api:Invoke resource names for
// a route pattern: each {wildcard} becomes "*".
func InvokePath(pattern string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") {
			segs[i] = "*"
		}
	}
	return strings.Join(segs, "/")
}

// addRoutes gives every route of the api function's table
// (httpapi.AllRoutes) its own HTTP API route: on a JWT stage with its
// level's scopes (any one of them admits), on an IAM stage with one
// managed policy per level granting execute-api:Invoke on exactly that
// level's routes (admin: the whole API), exported as stack outputs. The
// catch-all APIRoutePath sends the rest of /ojs (unknown paths answered
// in the OJS shape, the console's dashboard) to the function, for admins.
func (o *OJSServerless) addRoutes(integration awsapigatewayv2.HttpRouteIntegration) {
	jwt := o.props.JWT != nil
	route := func(method, path string, lv httpapi.Level) {
		opts := &awsapigatewayv2.AddRoutesOptions{Path: jsii.String(path), Integration: integration,
			Methods: &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(method)}}
		if jwt && lv != httpapi.LevelAny {
			opts.AuthorizationScopes = jsii.Strings(lv.Scopes()...)
		}
		o.HTTPAPI.AddRoutes(opts)
	}
	route(string(awsapigatewayv2.HttpMethod_ANY), APIRoutePath, httpapi.LevelAdmin)
	resources := map[httpapi.Level][]*string{httpapi.LevelAdmin: {o.HTTPAPI.ArnForExecuteApi(nil, nil, nil)}}
	for _, rt := range httpapi.AllRoutes() {
		if strings.HasSuffix(rt.Pattern, "{$}") {
			continue // API Gateway has no end anchor: the catch-all serves it
		}
		route(rt.Method, rt.Pattern, rt.Level)
		arn := o.HTTPAPI.ArnForExecuteApi(jsii.String(rt.Method), jsii.String(InvokePath(rt.Pattern)), nil)
		for _, lv := range []httpapi.Level{httpapi.LevelProducer, httpapi.LevelWorker} {
			if lv.Allows(rt.Level) {
				resources[lv] = append(resources[lv], arn)
			}
		}
	}
	if jwt {
		return
	}
	o.Policies = map[httpapi.Level]awsiam.ManagedPolicy{}
	for _, lv := range httpapi.Levels {
		p := awsiam.NewManagedPolicy(o.Construct, jsii.String(pascal(string(lv))+"Policy"), &awsiam.ManagedPolicyProps{
			Description: jsii.String("Calls the OJS API (" + o.Env.Name + ") as " + string(lv) + " (docs/security.md#permission-levels)"),
			Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Actions: jsii.Strings("execute-api:Invoke"), Resources: new(resources[lv]),
			})},
		})
		suppress(p, "AwsSolutions-IAM5", "The wildcards stand for a route's path parameters (job and workflow ids) and the stage; "+
			"the admin policy covers the whole API by design.")
		o.Policies[lv] = p
		awscdk.NewCfnOutput(awscdk.Stack_Of(o.Construct), jsii.String(PolicyOutput(lv)), &awscdk.CfnOutputProps{
			Value:       p.ManagedPolicyArn(),
			Description: jsii.String("Managed policy to attach to OJS " + string(lv) + "s (execute-api:Invoke on their routes)"),
		})
	}
}
