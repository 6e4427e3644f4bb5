package ojsconstruct

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/metrics"
	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// The comparisons of the alarms' thresholds.
const (
	above   = awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD
	atLeast = awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD
)

func metricOpts(stat string, minutes float64) *awscloudwatch.MetricOptions {
	return &awscloudwatch.MetricOptions{
		Statistic: jsii.String(stat),
		Period:    awscdk.Duration_Minutes(jsii.Number(minutes)),
	}
}

// alarm creates an alarm that fires on the first breaching period, treats
// missing data (no traffic) as fine and notifies the alarm topic.
func (o *OJSServerless) alarm(id string, m awscloudwatch.IMetric, op awscloudwatch.ComparisonOperator, threshold float64, desc string) awscloudwatch.Alarm {
	a := awscloudwatch.NewAlarm(o.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
		Metric:             m,
		Threshold:          jsii.Number(threshold),
		ComparisonOperator: op,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		AlarmDescription:   jsii.String(desc + " (" + o.Env.Name + ")"),
	})
	a.AddAlarmAction(awscloudwatchactions.NewSnsAction(o.AlarmTopic))
	a.AddOkAction(awscloudwatchactions.NewSnsAction(o.AlarmTopic))
	o.Alarms = append(o.Alarms, a)
	return a
}

// addAlarmTopic uses Props.AlarmTopic or creates the environment's topic,
// and subscribes Props.AlarmEmail to it. A created topic enforces TLS. It
// is not KMS-encrypted: CloudWatch alarms cannot publish to a topic under
// the AWS managed SNS key, and the notifications carry alarm names and
// metric values only.
func (o *OJSServerless) addAlarmTopic() {
	o.AlarmTopic = o.props.AlarmTopic
	if o.AlarmTopic == nil {
		o.AlarmTopic = awssns.NewTopic(o.Construct, jsii.String("AlarmTopic"), &awssns.TopicProps{
			DisplayName: jsii.String("OJS alarms (" + o.Env.Name + ")"),
			EnforceSSL:  jsii.Bool(true),
		})
	}
	if o.props.AlarmEmail != "" {
		awssns.NewSubscription(o.Construct, jsii.String("AlarmEmail"), &awssns.SubscriptionProps{
			Topic:    o.AlarmTopic,
			Protocol: awssns.SubscriptionProtocol_EMAIL,
			Endpoint: jsii.String(o.props.AlarmEmail),
		})
	}
}

func dlqDepth(q awssqs.Queue) awscloudwatch.Metric {
	return q.MetricApproximateNumberOfMessagesVisible(metricOpts("Maximum", 1))
}

func (o *OJSServerless) addAlarms() {
	o.addAlarmTopic()
	for _, q := range o.Env.Queues {
		o.alarm("DeadLetterQueueAlarm-"+q.Name, dlqDepth(o.DeadLetterQueues[q.Name]), above, 0,
			"Messages in the dead-letter queue of OJS queue "+q.Name)
		o.alarm("QueueAgeAlarm-"+q.Name, o.Queues[q.Name].MetricApproximateAgeOfOldestMessage(metricOpts("Maximum", 5)),
			above, o.props.QueueAgeAlarmThreshold.Seconds(), "The oldest message of push queue "+q.Name+" waits too long for the worker function")
	}
	for _, ix := range o.throttleScopes() {
		o.alarm(ix.id, ix.metric, atLeast, 1, "DynamoDB throttled reads or writes on "+ix.label)
	}
	o.alarm("StreamFailureQueueAlarm", dlqDepth(o.StreamFailureQueue), above, 0, "Stream batches dropped after all retries")
	o.alarm("StreamIteratorAgeAlarm", o.iteratorAge(), above, float64(o.props.IteratorAgeAlarmThreshold.Milliseconds()),
		"The stream function lags behind table writes")
	for _, name := range topology.FunctionNames {
		fn, p := o.Functions[name], pascal(name)
		o.alarm(p+"ErrorsAlarm", fn.MetricErrors(metricOpts("Sum", 5)), atLeast, 1, "Errors in the OJS "+name+" function")
		o.alarm(p+"ThrottlesAlarm", fn.MetricThrottles(metricOpts("Sum", 5)), atLeast, 1, "Throttled invocations of the OJS "+name+" function")
	}
	if o.HTTPAPI != nil {
		o.alarm("ApiServerErrorsAlarm", o.HTTPAPI.MetricServerError(metricOpts("Sum", 5)), atLeast, 1, "5xx responses from the OJS HTTP API")
		o.alarm("ApiLatencyAlarm", o.HTTPAPI.MetricLatency(metricOpts("p99", 5)), above, float64(o.props.APILatencyAlarmThreshold.Milliseconds()),
			"p99 latency of the OJS HTTP API")
	}
}

// throttleScope is the table or one of its indexes, with the sum of its
// read and write throttle events over five minutes.
type throttleScope struct {
	id, label string
	metric    awscloudwatch.IMetric
}

// throttleScopes returns the table and each GSI: DynamoDB reports
// ReadThrottleEvents and WriteThrottleEvents per table and, with the
// GlobalSecondaryIndexName dimension, per index (an index's throttled
// writes also throttle the table's writes). On-demand tables throttle
// above twice their previous peak and on hot partitions.
func (o *OJSServerless) throttleScopes() []throttleScope {
	var out []throttleScope
	scope := func(id, label string, dims map[string]*string) throttleScope {
		// Ids must be unique among the expressions of one graph.
		n := fmt.Sprint(len(out))
		m := func(name string) awscloudwatch.IMetric {
			return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
				Namespace:     jsii.String("AWS/DynamoDB"),
				MetricName:    jsii.String(name),
				DimensionsMap: &dims,
				Statistic:     jsii.String("Sum"),
				Period:        awscdk.Duration_Minutes(jsii.Number(5)),
			})
		}
		return throttleScope{id: id, label: label, metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression:   jsii.String("FILL(r" + n + ", 0) + FILL(w" + n + ", 0)"),
			UsingMetrics: &map[string]awscloudwatch.IMetric{"r" + n: m("ReadThrottleEvents"), "w" + n: m("WriteThrottleEvents")},
			Label:        jsii.String("throttle events " + label),
			Period:       awscdk.Duration_Minutes(jsii.Number(5)),
		})}
	}
	out = append(out, scope("TableThrottleAlarm", "the job table", map[string]*string{"TableName": o.Table.TableName()}))
	for _, ix := range topology.JobTable.Indexes {
		out = append(out, scope("TableThrottleAlarm-"+ix.Name, "index "+ix.Name, map[string]*string{
			"TableName": o.Table.TableName(), "GlobalSecondaryIndexName": jsii.String(ix.Name),
		}))
	}
	return out
}

func (o *OJSServerless) iteratorAge() awscloudwatch.Metric {
	return o.Functions[topology.FunctionStream].Metric(jsii.String("IteratorAge"), metricOpts("Maximum", 1))
}

func graph(title string, metrics ...awscloudwatch.IMetric) awscloudwatch.IWidget {
	return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
		Title:  jsii.String(title),
		Left:   &metrics,
		Width:  jsii.Number(8),
		Height: jsii.Number(6),
	})
}

func (o *OJSServerless) addDashboard() {
	d := awscloudwatch.NewDashboard(o.Construct, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
	if api := o.HTTPAPI; api != nil {
		d.AddWidgets(
			graph("API requests", api.MetricCount(metricOpts("Sum", 1))),
			graph("API errors", api.MetricClientError(metricOpts("Sum", 1)), api.MetricServerError(metricOpts("Sum", 1))),
			graph("API latency p99", api.MetricLatency(metricOpts("p99", 1))),
		)
	}
	var inv, errs, thr, dur []awscloudwatch.IMetric
	for _, name := range topology.FunctionNames {
		fn := o.Functions[name]
		label := func(m awscloudwatch.Metric) awscloudwatch.IMetric {
			return m.With(&awscloudwatch.MetricOptions{Label: jsii.String(name)})
		}
		inv = append(inv, label(fn.MetricInvocations(metricOpts("Sum", 1))))
		errs = append(errs, label(fn.MetricErrors(metricOpts("Sum", 1))))
		thr = append(thr, label(fn.MetricThrottles(metricOpts("Sum", 1))))
		dur = append(dur, label(fn.MetricDuration(metricOpts("p99", 1))))
	}
	d.AddWidgets(
		graph("Invocations", inv...),
		graph("Function errors", errs...),
		graph("Throttles", thr...),
	)
	var visible, age, dead []awscloudwatch.IMetric
	for _, q := range o.Env.Queues {
		l := &awscloudwatch.MetricOptions{Label: jsii.String(q.Name)}
		visible = append(visible, o.Queues[q.Name].MetricApproximateNumberOfMessagesVisible(metricOpts("Maximum", 1)).With(l))
		age = append(age, o.Queues[q.Name].MetricApproximateAgeOfOldestMessage(metricOpts("Maximum", 1)).With(l))
		dead = append(dead, dlqDepth(o.DeadLetterQueues[q.Name]).With(l))
	}
	dead = append(dead, dlqDepth(o.StreamFailureQueue).With(&awscloudwatch.MetricOptions{Label: jsii.String("stream failures")}))
	d.AddWidgets(
		graph("Push queue depth", visible...),
		graph("Oldest push message (s)", age...),
		graph("Dead letters", dead...),
	)
	alarms := make([]interfacesawscloudwatch.IAlarmRef, len(o.Alarms))
	for i, a := range o.Alarms {
		alarms[i] = a
	}
	var throttles []awscloudwatch.IMetric
	for _, sc := range o.throttleScopes() {
		throttles = append(throttles, sc.metric)
	}
	jobs := []awscloudwatch.IMetric{}
	for _, m := range []string{metrics.JobsEnqueued, metrics.JobsCompleted, metrics.JobsFailed, metrics.JobsDiscarded} {
		jobs = append(jobs, o.jobMetric(m, "Sum", ""))
	}
	latency := []awscloudwatch.IMetric{o.jobMetric(metrics.JobLatency, "p99", "")}
	for _, q := range o.Env.Queues {
		latency = append(latency, o.jobMetric(metrics.JobLatency, "p99", q.Name))
	}
	d.AddWidgets(
		graph("Jobs (all queues)", jobs...),
		graph("Job latency p99 (ms): enqueued to completed", latency...),
		graph("DynamoDB throttle events", throttles...),
	)
	d.AddWidgets(
		graph("Duration p99", dur...),
		graph("Stream iterator age (ms)", o.iteratorAge()),
		awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
			Title:  jsii.String("Alarms"),
			Alarms: &alarms,
			Width:  jsii.Number(8),
			Height: jsii.Number(6),
		}),
	)
	o.Dashboard = d
}

// jobMetric is one of the lifecycle metrics the stream function writes
// (pkg/metrics), for one queue or, with queue "", all queues.
func (o *OJSServerless) jobMetric(name, stat, queue string) awscloudwatch.IMetric {
	dims := map[string]*string{metrics.DimensionEnvironment: jsii.String(o.Env.Name)}
	label := name + " (all queues)"
	if queue != "" {
		dims[metrics.DimensionQueue] = jsii.String(queue)
		label = name + " " + queue
	}
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(metrics.Namespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &dims,
		Statistic:     jsii.String(stat),
		Period:        awscdk.Duration_Minutes(jsii.Number(1)),
		Label:         jsii.String(label),
	})
}
