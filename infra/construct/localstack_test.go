package ojsconstruct

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The LocalStack container starts only the services its compose file lists
// in SERVICES and refuses calls to any other, so a resource of a service
// left out fails `make localstack-deploy` half-way (the alarm topic did:
// sns was missing). These tests keep SERVICES in step with the template
// without running LocalStack.

// composeFile and infraMk are relative to this package's directory, where
// go test runs.
var (
	composeFile = filepath.Join("..", "..", "localstack", "docker-compose.yml")
	infraMk     = filepath.Join("..", "infra.mk")
)

// localStackServices maps the service of a CloudFormation resource type
// (AWS::<Service>::<Resource>) to the LocalStack services, as SERVICES
// names them, that creating and using the resource needs. A type whose
// service is not here fails the test: add it once you know what LocalStack
// needs for it (https://docs.localstack.cloud/references/coverage/), and
// check that the free image serves it.
var localStackServices = map[string][]string{
	"ApiGatewayV2":   {"apigateway"},
	"CloudFormation": {"cloudformation"},
	"CloudWatch":     {"cloudwatch"},
	"DynamoDB":       {"dynamodb"}, // and dynamodbstreams with a stream: see servicesFor
	"Events":         {"events"},
	"IAM":            {"iam"},
	"Lambda":         {"lambda"},
	"Logs":           {"logs"},
	"S3":             {"s3"},
	"SNS":            {"sns"},
	"SQS":            {"sqs"},
	"SSM":            {"ssm"},
	"STS":            {"sts"},
	// AWS::CDK::Metadata is handled by CloudFormation itself.
	"CDK": {"cloudformation"},
}

// servicesFor returns the LocalStack services a resource of the given type
// and properties needs, or an error naming the type when it is not mapped.
func servicesFor(typ string, props map[string]any) ([]string, error) {
	if strings.HasPrefix(typ, "Custom::") || typ == "AWS::CloudFormation::CustomResource" {
		// A custom resource runs its provider function.
		return []string{"cloudformation", "lambda"}, nil
	}
	parts := strings.Split(typ, "::")
	if len(parts) != 3 || parts[0] != "AWS" {
		return nil, fmt.Errorf("resource type %q is not AWS::<Service>::<Resource>", typ)
	}
	svcs, ok := localStackServices[parts[1]]
	if !ok {
		return nil, fmt.Errorf("resource type %s: service %s has no LocalStack mapping; add it to localStackServices "+
			"(infra/construct/localstack_test.go) and, when LocalStack's free image serves it, to SERVICES in localstack/docker-compose.yml",
			typ, parts[1])
	}
	if typ == "AWS::DynamoDB::Table" && props["StreamSpecification"] != nil {
		svcs = append(append([]string(nil), svcs...), "dynamodbstreams")
	}
	return svcs, nil
}

// deployServices are what `cdklocal bootstrap` and `cdklocal deploy` call
// themselves, whatever the template holds.
var deployServices = map[string]string{
	"cloudformation": "the bootstrap and application stacks (change sets)",
	"s3":             "asset publishing (the functions' zips and the template go to the bootstrap bucket)",
	"ssm":            "the bootstrap version parameter the CLI and the change set read",
	"sts":            "the CLI's caller identity and the bootstrap roles it assumes",
	"iam":            "the bootstrap stack's publishing, deployment and execution roles",
}

// bootstrapTypes are the resource types the CDK CLI's bootstrap template
// (aws-cdk 2.1148.1, bootstrap version 33, pinned in infra/package.json)
// creates with cdklocal's defaults: no customer KMS key (the CLI passes
// AWS_MANAGED_KEY) and no permissions boundary. Its AWS::ECR::Repository
// (ContainerAssetsRepository) is left out on purpose: the stack publishes
// no container images, ECR is not part of LocalStack's free image, and
// LocalStack's CloudFormation skips resource types it does not serve.
var bootstrapTypes = []string{
	"AWS::S3::Bucket", "AWS::S3::BucketPolicy",
	"AWS::IAM::Role", "AWS::IAM::Policy",
	"AWS::SSM::Parameter",
}

// composeServices returns the SERVICES list of the compose file, in
// either of compose's environment forms (`SERVICES: a,b` or
// `- SERVICES=a,b`). It fails unless there is exactly one.
func composeServices(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\s*(?:-\s*)?["']?SERVICES["']?\s*[:=]\s*(.*)$`)
	var values []string
	for _, line := range strings.Split(string(raw), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			v := m[1]
			if i := strings.Index(v, " #"); i >= 0 {
				v = v[:i]
			}
			values = append(values, strings.Trim(strings.TrimSpace(v), `"'`))
		}
	}
	if len(values) != 1 {
		t.Fatalf("%s: want one SERVICES setting, found %d", path, len(values))
	}
	out := map[string]bool{}
	for _, s := range strings.Split(values[0], ",") {
		if s = strings.TrimSpace(s); s != "" {
			out[s] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: SERVICES is empty (LocalStack would start every service; list them)", path)
	}
	return out
}

// TestLocalStackDeployShape: `make localstack-deploy` synthesises the
// shape synthFunctionURL builds (env local, the function URL frontend), so
// the template TestLocalStackServicesCoverTheStack checks is the one
// deployed.
func TestLocalStackDeployShape(t *testing.T) {
	raw, err := os.ReadFile(infraMk)
	if err != nil {
		t.Fatal(err)
	}
	// The INFRA_LOCAL_CTX definition with its continuation lines.
	var def []string
	for _, line := range strings.Split(string(raw), "\n") {
		if len(def) == 0 && !strings.HasPrefix(line, "INFRA_LOCAL_CTX") {
			continue
		}
		def = append(def, line)
		if !strings.HasSuffix(line, `\`) {
			break
		}
	}
	ctx := strings.Join(def, " ")
	for _, want := range []string{"-c env=local", "-c frontend=" + string(FrontendFunctionURL)} {
		if !strings.Contains(ctx, want) {
			t.Errorf("%s: INFRA_LOCAL_CTX lacks %q; synthFunctionURL (the template the LocalStack services test checks) "+
				"must build what localstack-deploy deploys: %q", infraMk, want, ctx)
		}
	}
}

// TestLocalStackServicesCoverTheStack: SERVICES in the compose file lists
// every LocalStack service that bootstrapping, deploying and running the
// LocalStack template need.
func TestLocalStackServicesCoverTheStack(t *testing.T) {
	enabled := composeServices(t, composeFile)
	why := map[string][]string{} // service -> what needs it
	for svc, reason := range deployServices {
		why[svc] = append(why[svc], "cdklocal: "+reason)
	}
	for _, typ := range bootstrapTypes {
		svcs, err := servicesFor(typ, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, svc := range svcs {
			why[svc] = append(why[svc], "bootstrap stack: "+typ)
		}
	}
	s := synthFunctionURL(t)
	resources := s.doc["Resources"].(map[string]any)
	for _, id := range sortedKeys(resources) {
		res := resources[id].(map[string]any)
		typ, _ := res["Type"].(string)
		svcs, err := servicesFor(typ, props(res))
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		for _, svc := range svcs {
			why[svc] = append(why[svc], typ+" "+id)
		}
	}
	var missing []string
	for _, svc := range sortedKeys(why) {
		if enabled[svc] {
			continue
		}
		reasons := why[svc]
		sort.Strings(reasons)
		if len(reasons) > 3 {
			reasons = append(reasons[:3:3], fmt.Sprintf("and %d more", len(why[svc])-3))
		}
		missing = append(missing, fmt.Sprintf("  %s, needed by %s", svc, strings.Join(reasons, "; ")))
	}
	if len(missing) > 0 {
		t.Errorf("%s: SERVICES lacks services the LocalStack deploy needs (LocalStack refuses calls to services not listed):\n%s",
			composeFile, strings.Join(missing, "\n"))
	}
}

// TestLocalStackServicesMapping: a resource type without a mapping fails,
// so a new service cannot slip past the check above.
func TestLocalStackServicesMapping(t *testing.T) {
	for typ, want := range map[string]string{
		"AWS::SNS::Topic":                 "sns",
		"AWS::ApiGatewayV2::Api":          "apigateway",
		"Custom::LogRetention":            "cloudformation lambda",
		"AWS::CloudWatch::Alarm":          "cloudwatch",
		"AWS::Lambda::EventSourceMapping": "lambda",
	} {
		got, err := servicesFor(typ, nil)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("servicesFor(%s) = %v, %v; want %s", typ, got, err, want)
		}
	}
	if got, _ := servicesFor("AWS::DynamoDB::Table", map[string]any{"StreamSpecification": map[string]any{"StreamViewType": "NEW_AND_OLD_IMAGES"}}); strings.Join(got, " ") != "dynamodb dynamodbstreams" {
		t.Errorf("a table with a stream needs %v", got)
	}
	if got, _ := servicesFor("AWS::DynamoDB::Table", map[string]any{}); strings.Join(got, " ") != "dynamodb" {
		t.Errorf("a table without a stream needs %v", got)
	}
	for _, typ := range []string{"AWS::CodeDeploy::Application", "AWS::ECR::Repository", "AWS::StepFunctions::StateMachine", "Ojs::Thing"} {
		if _, err := servicesFor(typ, nil); err == nil {
			t.Errorf("servicesFor(%s) has no error: an unmapped type must fail the test", typ)
		}
	}
}
