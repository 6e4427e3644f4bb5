package ojsconstruct

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func metricOpts(stat string, minutes float64) *awscloudwatch.MetricOptions {
	return &awscloudwatch.MetricOptions{
		Statistic: jsii.String(stat),
		Period:    awscdk.Duration_Minutes(jsii.Number(minutes)),
	}
}

// alarm creates an alarm that fires on the first breaching period and
// treats missing data (no traffic) as fine.
func (o *OJSServerless) alarm(id string, m awscloudwatch.IMetric, op awscloudwatch.ComparisonOperator, threshold float64, desc string) {
	a := awscloudwatch.NewAlarm(o.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
		Metric:             m,
		Threshold:          jsii.Number(threshold),
		ComparisonOperator: op,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		AlarmDescription:   jsii.String(desc + " (" + o.Env.Name + ")"),
	})
	if t := o.props.AlarmTopic; t != nil {
		a.AddAlarmAction(awscloudwatchactions.NewSnsAction(t))
		a.AddOkAction(awscloudwatchactions.NewSnsAction(t))
	}
	o.Alarms = append(o.Alarms, a)
}

func dlqDepth(q awssqs.Queue) awscloudwatch.Metric {
	return q.MetricApproximateNumberOfMessagesVisible(metricOpts("Maximum", 1))
}

func (o *OJSServerless) addAlarms() {
	for _, q := range o.Env.Queues {
		o.alarm("DeadLetterQueueAlarm-"+q.Name, dlqDepth(o.DeadLetterQueues[q.Name]),
			awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 0,
			"Messages in the dead-letter queue of OJS queue "+q.Name)
	}
	o.alarm("StreamFailureQueueAlarm", dlqDepth(o.StreamFailureQueue),
		awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 0,
		"Stream batches dropped after all retries")
	o.alarm("StreamIteratorAgeAlarm", o.iteratorAge(),
		awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		float64(o.props.IteratorAgeAlarmThreshold.Milliseconds()),
		"The stream function lags behind table writes")
	for _, name := range topology.FunctionNames {
		fn := o.Functions[name]
		p := pascal(name)
		o.alarm(p+"ErrorsAlarm", fn.MetricErrors(metricOpts("Sum", 5)),
			awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1,
			"Errors in the OJS "+name+" function")
		o.alarm(p+"ThrottlesAlarm", fn.MetricThrottles(metricOpts("Sum", 5)),
			awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1,
			"Throttled invocations of the OJS "+name+" function")
	}
	if o.HTTPAPI != nil {
		o.alarm("ApiServerErrorsAlarm", o.HTTPAPI.MetricServerError(metricOpts("Sum", 5)),
			awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1,
			"5xx responses from the OJS HTTP API")
	}
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
