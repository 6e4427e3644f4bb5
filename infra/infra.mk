# infra/infra.mk: build, synthesise and deploy the OJS serverless stack.
# Included from the root Makefile (`include infra/infra.mk`); run from the
# repository root. See docs/infrastructure.md.
#
#   make build                      cross-compile the functions (linux/arm64) into build/lambda/<fn>/bootstrap
#   make build-host                 the same for this machine's architecture into build/lambda-host/ (LocalStack)
#   make synth                      synthesise dev, staging and prod offline into cdk.out/<env>
#   make test-infra                 template tests (go test ./infra/...)
#   make bootstrap-cdk [ENV=dev]    cdk bootstrap the account/region of your AWS credentials
#   make deploy ENV=dev|staging|prod   preflight (concurrency; bootstrap when missing), then cdk deploy
#   make destroy ENV=dev|staging|prod
#   make localstack-up / localstack-down
#   make localstack-deploy          deploy env "local" to LocalStack with cdklocal
#   make test-localstack            localstack-deploy, then the e2e suite against it
#   make test-e2e URL=<ApiUrl> [TOKEN=<bearer token or JWT>] [SIGV4=1|0] [BROWSER=1]
#
# Variables: ENV (default dev), CDK_ARGS (extra cdk arguments, e.g.
# "--profile prod --require-approval never"), SYNTH_ENVS, SYNTH_ACCOUNT,
# SYNTH_REGION, SYNTH_ALARM_EMAIL, OJS_LOCAL_TOKEN, LOCALSTACK_URL, E2E_TIMEOUT.
#
# prod and staging are pinned to an account and region named in context:
# CDK_ARGS="-c account=<id> -c region=<region>" or cdk.json's
# "environments": {"<env>": {"account": ..., "region": ...}}, and need an
# alarm destination: -c alarmEmail=<address> or -c alarmTopicArn=<arn>
# (synth passes SYNTH_ACCOUNT/SYNTH_REGION/SYNTH_ALARM_EMAIL placeholders).

GO                 ?= go
INFRA_FUNCTIONS    := api worker stream sweeper
LAMBDA_DIR         ?= build/lambda
LAMBDA_HOST_DIR    ?= build/lambda-host
ENV                ?= dev
CDK_ARGS           ?=
SYNTH_ENVS         ?= dev staging prod
# A placeholder account and region: synthesis needs no credentials and makes
# no lookups; the templates only name them in asset locations.
SYNTH_ACCOUNT      ?= 123456789012
SYNTH_REGION       ?= us-east-1
# staging and prod need an alarm destination; synth subscribes a placeholder.
SYNTH_ALARM_EMAIL  ?= alarms@example.com
# go test -timeout of the e2e suite against a deployment (test-e2e,
# test-localstack): a hung request or a stage that never settles fails the
# run instead of holding it forever.
E2E_TIMEOUT        ?= 30m

INFRA_NPM_STAMP    := infra/node_modules/go.mod
CDK                := infra/node_modules/.bin/cdk
CDKLOCAL           := infra/node_modules/.bin/cdklocal
INFRA_STACK         = OjsServerless-$(1)
# Quiet the Node.js 20 banners of jsii and the CLI; no telemetry, no
# version check (both would go to the network).
INFRA_CDK_ENV      := JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1 \
                      JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=18,20 \
                      CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=1

LOCALSTACK_COMPOSE := localstack/docker-compose.yml
LOCALSTACK_URL     ?= http://localhost.localstack.cloud:4566
LOCALSTACK_S3_URL  ?= http://s3.localhost.localstack.cloud:4566
LOCALSTACK_REGION  := us-east-1
LOCALSTACK_ACCOUNT := 000000000000
LOCALSTACK_OUTPUTS := build/localstack-outputs.json
# Bearer token of the api function on LocalStack (its function URL has no
# authorizer); not a secret, the stack only runs on your machine.
OJS_LOCAL_TOKEN    ?= ojs-localstack-token
INFRA_HOST_GOARCH   = $(shell $(GO) env GOARCH)
INFRA_HOST_ARCH     = $(if $(filter arm64,$(INFRA_HOST_GOARCH)),arm64,$(if $(filter amd64,$(INFRA_HOST_GOARCH)),x86_64,unsupported-$(INFRA_HOST_GOARCH)))
INFRA_COMPOSE       = docker compose -f $(LOCALSTACK_COMPOSE)
# cdklocal drops other AWS_* variables and uses test credentials; endpoint
# overrides meant for the offline emulators must not leak into it.
INFRA_LOCAL_ENV     = env -u AWS_ENDPOINT_URL_DYNAMODB -u AWS_ENDPOINT_URL_SQS -u AWS_ENDPOINT_URL_DYNAMODB_STREAMS \
                      AWS_ENDPOINT_URL=$(LOCALSTACK_URL) AWS_ENDPOINT_URL_S3=$(LOCALSTACK_S3_URL) $(INFRA_CDK_ENV)
INFRA_LOCAL_CTX     = -c env=local -c frontend=function-url -c authToken=$(OJS_LOCAL_TOKEN) \
                      -c arch=$(INFRA_HOST_ARCH) -c assetDir=$(LAMBDA_HOST_DIR) \
                      -c account=$(LOCALSTACK_ACCOUNT) -c region=$(LOCALSTACK_REGION)

.PHONY: build build-host synth test-infra bootstrap-cdk deploy destroy \
        localstack-up localstack-down localstack-deploy test-localstack test-e2e \
        infra-check-node infra-check-docker infra-check-env

# --- Lambda binaries ------------------------------------------------------

build:
	@for fn in $(INFRA_FUNCTIONS); do \
		echo "go build ./functions/$$fn -> $(LAMBDA_DIR)/$$fn/bootstrap (linux/arm64)"; \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags="-s -w" \
			-o $(LAMBDA_DIR)/$$fn/bootstrap ./functions/$$fn || exit 1; \
	done

build-host:
	@case "$(INFRA_HOST_ARCH)" in unsupported-*) echo "infra: Lambda runs arm64 or x86_64, not $(INFRA_HOST_GOARCH)" >&2; exit 1;; esac
	@for fn in $(INFRA_FUNCTIONS); do \
		echo "go build ./functions/$$fn -> $(LAMBDA_HOST_DIR)/$$fn/bootstrap (linux/$(INFRA_HOST_GOARCH))"; \
		GOOS=linux GOARCH=$(INFRA_HOST_GOARCH) CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags="-s -w" \
			-o $(LAMBDA_HOST_DIR)/$$fn/bootstrap ./functions/$$fn || exit 1; \
	done

# --- CDK CLI (pinned in infra/package-lock.json) ----------------------------

infra-check-node:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
		echo "infra: the CDK CLI needs Node.js (>= 20) and npm on PATH; install them (https://nodejs.org) and retry." >&2; exit 1; }
	@n=$$(node -p 'process.versions.node.split(".")[0]'); [ "$$n" -ge 20 ] || { \
		echo "infra: the CDK CLI needs Node.js >= 20 (found $$n)." >&2; exit 1; }

# npm ci runs infra/package.json's postinstall, which writes a go.mod into
# node_modules so `go test ./...` skips the Go files the CDK CLI ships; the
# printf repeats that when scripts were disabled.
$(INFRA_NPM_STAMP): infra/package.json infra/package-lock.json | infra-check-node
	npm ci --prefix infra --no-audit --no-fund
	@test -f $@ || printf 'module ignore/infra/node_modules\n' > $@
	@touch $@

# --- Synthesis, tests, deployment -------------------------------------------

synth: infra-check-node build $(INFRA_NPM_STAMP)
	@for e in $(SYNTH_ENVS); do \
		echo "cdk synth $(call INFRA_STACK,$$e) -> cdk.out/$$e"; \
		env $(INFRA_CDK_ENV) AWS_EC2_METADATA_DISABLED=true $(CDK) synth --quiet --no-notices \
			-c env=$$e -c account=$(SYNTH_ACCOUNT) -c region=$(SYNTH_REGION) -c alarmEmail=$(SYNTH_ALARM_EMAIL) \
			-o cdk.out/$$e $(call INFRA_STACK,$$e) || exit 1; \
	done

test-infra:
	env $(INFRA_CDK_ENV) $(GO) test ./infra/... -count=1

infra-check-env:
	@case "$(ENV)" in dev|staging|prod) ;; *) echo "infra: ENV=$(ENV): want dev, staging or prod (local is for LocalStack)" >&2; exit 2;; esac

bootstrap-cdk: infra-check-env infra-check-node build $(INFRA_NPM_STAMP)
	env $(INFRA_CDK_ENV) $(CDK) bootstrap --no-notices -c env=$(ENV) $(CDK_ARGS)

# The preflight (infra/cmd/preflight) refuses a stack whose reserved Lambda
# concurrency the region cannot give, and exits 3 when the account and
# region need cdk bootstrap, which then runs; it reads --profile and
# -c region=... from CDK_ARGS.
deploy: infra-check-env infra-check-node build $(INFRA_NPM_STAMP)
	$(GO) build -o build/preflight ./infra/cmd/preflight
	@build/preflight $(ENV) $(CDK_ARGS) || { rc=$$?; [ $$rc -eq 3 ] || exit $$rc; \
		echo "cdk bootstrap -c env=$(ENV) $(CDK_ARGS)"; \
		env $(INFRA_CDK_ENV) $(CDK) bootstrap --no-notices -c env=$(ENV) $(CDK_ARGS); }
	env $(INFRA_CDK_ENV) $(CDK) deploy --no-notices -c env=$(ENV) \
		--outputs-file build/outputs-$(ENV).json $(CDK_ARGS) $(call INFRA_STACK,$(ENV))

# Synthesis needs the binaries even to delete, hence build. prod keeps its
# table and log groups (RETAIN); cdk destroy asks for confirmation.
destroy: infra-check-env infra-check-node build $(INFRA_NPM_STAMP)
	env $(INFRA_CDK_ENV) $(CDK) destroy --no-notices -c env=$(ENV) $(CDK_ARGS) $(call INFRA_STACK,$(ENV))

# Against an IAM-authorised stage the suite signs every request with SigV4
# (execute-api, the URL's region, your AWS credentials: AWS_PROFILE etc.);
# TOKEN= a JWT for a JWT-authorised stage instead; SIGV4=1 signs for a
# custom domain (set AWS_REGION), SIGV4=0 never. The console's browser
# tests are skipped unless BROWSER=1 (OJS_E2E_BROWSER=1): they need
# Chromium, and the browser cannot sign requests, so they only work with a
# bearer token (TOKEN=, or LocalStack). A 429 from the gateway is retried
# with backoff (e2e/client_test.go).
test-e2e:
	@test -n "$(URL)" || { echo "usage: make test-e2e URL=<OJS base URL, the ApiUrl stack output> [TOKEN=<bearer token or JWT>] [SIGV4=1|0] [BROWSER=1]" >&2; exit 2; }
	OJS_BASE_URL=$(URL) $(if $(TOKEN),OJS_AUTH_TOKEN=$(TOKEN)) $(if $(SIGV4),OJS_SIGV4=$(SIGV4)) $(if $(BROWSER),OJS_E2E_BROWSER=$(BROWSER)) \
		$(GO) test ./e2e/ -run . -count=1 -timeout $(E2E_TIMEOUT) -v

# --- LocalStack (needs Docker) ------------------------------------------------

infra-check-docker:
	@docker compose version >/dev/null 2>&1 || { \
		echo "infra: LocalStack needs Docker with the compose plugin (docker compose version); this target cannot run without it." >&2; exit 1; }

localstack-up: infra-check-docker
	$(INFRA_COMPOSE) up -d --wait

localstack-down: infra-check-docker
	$(INFRA_COMPOSE) down -v

localstack-deploy: infra-check-node build-host $(INFRA_NPM_STAMP)
	@curl -fsS -o /dev/null http://localhost:4566/_localstack/health || { \
		echo "infra: LocalStack is not answering on localhost:4566; run make localstack-up first." >&2; exit 1; }
	@mkdir -p $(dir $(LOCALSTACK_OUTPUTS))
	$(INFRA_LOCAL_ENV) $(CDKLOCAL) bootstrap --no-notices $(INFRA_LOCAL_CTX) aws://$(LOCALSTACK_ACCOUNT)/$(LOCALSTACK_REGION)
	$(INFRA_LOCAL_ENV) $(CDKLOCAL) deploy --no-notices --require-approval never $(INFRA_LOCAL_CTX) \
		--outputs-file $(LOCALSTACK_OUTPUTS) $(call INFRA_STACK,local)

# The e2e package only: ./e2e/scale and ./e2e/soak start their own
# emulators and never talk to LocalStack. BROWSER=1 adds the console tests
# (Chromium; the stack's bearer token authorises the browser too).
test-localstack: localstack-deploy
	@url=$$(node -e 'process.stdout.write(require(process.argv[1])["$(call INFRA_STACK,local)"].ApiUrl)' "$(CURDIR)/$(LOCALSTACK_OUTPUTS)") && \
		echo "OJS_BASE_URL=$$url" && \
		OJS_BASE_URL=$$url OJS_AUTH_TOKEN=$(OJS_LOCAL_TOKEN) $(if $(BROWSER),OJS_E2E_BROWSER=$(BROWSER)) \
		$(GO) test ./e2e/ -run . -count=1 -timeout $(E2E_TIMEOUT) -v
