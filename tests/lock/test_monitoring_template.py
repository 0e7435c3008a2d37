"""LockMonitoring: what it synthesizes (filters, alarms, the dashboard, the metrics function's
least privilege; cdk-nag and cfn-lint clean), its validation, the lock states it finds in every
section's definition, and the filter matcher the runtime judges its patterns with. (Its filters
and metrics function on real log lines: ``test_monitoring.py``.)
"""

from __future__ import annotations

import importlib
import json
import uuid

import aws_cdk as cdk
import pytest
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match

from locked_workflow.testing.log_filters import FilterPatternError, UnsupportedFilterPattern, matches
from locked_workflow.constructs_lib.monitoring import LockMonitoring
from locked_workflow.state_machines import lock_protocol as p
from monitoring_stack import Synth


def _resources(synth: Synth, type_name: str, path_part: str) -> dict[str, dict]:
    return {
        k: v for k, v in synth.synthesized.template["Resources"].items()
        if v["Type"] == type_name and path_part in v.get("Metadata", {}).get("aws:cdk:path", "")
    }


# ---- the template -----------------------------------------------------------------------------


def test_counts_are_metric_filters_on_the_workflows_log_group(synth):
    namespace = synth.stack.instant_monitoring.namespace
    assert namespace == f"LockedWorkflow/{synth.stack.instant.state_machine_name}"
    for group, monitoring, metric, state, event_type in [
        ("Instant", "instant_monitoring", "Timeouts", "Lock.Timeout", "FailStateEntered"),
        ("Instant", "instant_monitoring", "Lost", "Lock.Lost", "FailStateEntered"),
        ("Patient", "patient_monitoring", "LivenessChecks", "Lock.DescribeHolder", "TaskStateEntered"),
        ("Patient", "patient_monitoring", "LivenessTakeovers", "Lock.DescribeHolder", "TaskStateExited"),
    ]:
        synth.template.has_resource_properties("AWS::Logs::MetricFilter", {
            "LogGroupName": {"Ref": Match.string_like_regexp(f"^{group}Logs")},
            "FilterPattern": Match.string_like_regexp(
                f'\\$\\.type = "{event_type}"\\).*\\$\\.details\\.name = "{state}"'
            ),
            "MetricTransformations": [{
                "MetricNamespace": synth.monitoring(monitoring).namespace, "MetricName": metric,
                "MetricValue": "1", "DefaultValue": 0, "Unit": "Count",
            }],
        })
    # 4 per monitored workflow, the takeover filter reading the section's own wait variable
    assert len(_resources(synth, "AWS::Logs::MetricFilter", "/InstantMonitoring/")) == 4
    assert "$.details.assignedVariables.lockWait" in synth.pattern("patient_monitoring", "LivenessTakeovers")
    # a workflow that never waits (max_wait 0) has no liveness check: its filters match no line
    assert synth.monitoring("instant_monitoring").lock_states.liveness_checks == ()
    assert synth.pattern("instant_monitoring", "LivenessChecks") == '{ $.type = "LockMonitoring.NoSuchState" }'


def test_janitor_publishes_its_retires_in_the_workflows_namespace_and_its_failures_alarm(synth):
    """JanitorRetires comes from the janitor function itself (EMF): the monitoring tells it its
    namespace prefix, the function adds the state machine's name from each event."""
    monitoring = synth.stack.instant_monitoring
    synth.template.has_resource_properties("AWS::Lambda::Function", {
        "Handler": "index.handler",
        "Environment": {"Variables": Match.object_like({"METRICS_NAMESPACE_PREFIX": "LockedWorkflow"})},
        "DeadLetterConfig": {"TargetArn": {"Fn::GetAtt": [Match.string_like_regexp("^InstantJanitorDeadLetters"), "Arn"]}},
    })
    assert monitoring.namespace == f"LockedWorkflow/{synth.stack.instant.state_machine_name}"
    assert _resources(synth, "AWS::Logs::MetricFilter", "/InstantJanitor/") == {}  # no filter: EMF
    synth.template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible", "Statistic": "Maximum",
        "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [Match.string_like_regexp("^InstantJanitorDeadLetters"), "QueueName"]}}],
        "Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching",
        "AlarmDescription": Match.string_like_regexp("could not recover the locks of an ended execution"),
    })
    failures = monitoring.metric_janitor_failures()
    assert (failures.namespace, failures.metric_name, failures.statistic) == (
        "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum")
    # negative control: a workflow without a janitor has no such metric
    stack = cdk.Stack(cdk.App())
    bare = LockMonitoring(stack, "M", workflow=_workflow(stack, janitor=False))
    assert bare.janitor is None and bare.janitor_failed_alarm is None
    with pytest.raises(ValueError, match="needs a workflow with a janitor"):
        bare.metric_janitor_failures()


def test_durations_go_through_a_subscription_filter_to_the_metrics_function(synth):
    template = synth.template
    template.has_resource_properties("AWS::Logs::SubscriptionFilter", {
        "LogGroupName": {"Ref": Match.string_like_regexp("^InstantLogs")},
        "DestinationArn": {"Fn::GetAtt": [Match.string_like_regexp("^InstantMonitoringMetricsFunction"), "Arn"]},
        "FilterPattern": synth.subscription("instant_monitoring"),
    })
    template.has_resource_properties("AWS::Lambda::Permission", {
        "Action": "lambda:InvokeFunction", "Principal": "logs.amazonaws.com",
        "SourceArn": {"Fn::GetAtt": [Match.string_like_regexp("^InstantLogs"), "Arn"]},
    })
    template.has_resource_properties("AWS::Lambda::Function", {
        "Handler": "index.handler",
        "Runtime": "python3.13",
        "LoggingConfig": {"LogGroup": {"Ref": Match.string_like_regexp("^InstantMonitoringMetricsFunctionLogs")}},
        "Environment": {"Variables": {
            "POWERTOOLS_METRICS_NAMESPACE": synth.stack.instant_monitoring.namespace,
            "ACQUISITIONS": '{"Lock.Acquire":"lock"}', "POWERTOOLS_TRACE_DISABLED": "true",
        }},
    })


def test_metrics_function_may_only_write_its_own_log(synth):
    roles = _resources(synth, "AWS::IAM::Role", "/InstantMonitoring/")
    (role_id, role), = roles.items()
    assert "ManagedPolicyArns" not in role["Properties"]  # no AWSLambdaBasicExecutionRole
    policies = [v for v in synth.synthesized.template["Resources"].values()
                if v["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in v["Properties"]["Roles"]]
    statements = [s for policy in policies for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    (statement,) = statements
    assert statement["Effect"] == "Allow"
    assert statement["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]  # no "*" action
    (group, attribute) = statement["Resource"]["Fn::GetAtt"]  # its own log group, no wildcard
    assert group.startswith("InstantMonitoringMetricsFunctionLogs") and attribute == "Arn"


def test_lost_alarm_fires_on_any_lost_lock_and_timeout_rate_alarm_divides_by_starts(synth):
    namespace = synth.stack.instant_monitoring.namespace
    synth.template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": namespace, "MetricName": "Lost", "Statistic": "Sum", "Period": 300,
        "Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching",
        "AlarmDescription": Match.string_like_regexp("^Lock\\.Lost: "),
    })
    synth.template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Threshold": 0.05, "ComparisonOperator": "GreaterThanThreshold",
        "Metrics": Match.array_with([
            Match.object_like({"Expression": "IF(started > 0, timeouts / started, 0)", "ReturnData": True}),
            Match.object_like({"Id": "timeouts", "MetricStat": Match.object_like({
                "Metric": {"MetricName": "Timeouts", "Namespace": namespace}, "Stat": "Sum"})}),
            Match.object_like({"Id": "started", "MetricStat": Match.object_like({
                "Metric": Match.object_like({"MetricName": "ExecutionsStarted", "Namespace": "AWS/States"}),
                "Stat": "Sum"})}),
        ]),
    })
    # the Patient monitoring asked for neither alarm nor dashboard: only its janitor's alarm
    assert len(_resources(synth, "AWS::CloudWatch::Alarm", "/InstantMonitoring/")) == 3
    (janitor_alarm,) = _resources(synth, "AWS::CloudWatch::Alarm", "/PatientMonitoring/").values()
    assert janitor_alarm["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert len(_resources(synth, "AWS::CloudWatch::Dashboard", "/InstantMonitoring/")) == 1
    assert _resources(synth, "AWS::CloudWatch::Dashboard", "/PatientMonitoring/") == {}


def test_dashboard_shows_every_metric_and_the_alarms(synth):
    (board,) = _resources(synth, "AWS::CloudWatch::Dashboard", "/InstantMonitoring/").values()
    body = json.dumps(board["Properties"]["DashboardBody"])
    for metric in ("WaitTime", "HoldTime", "Timeouts", "Lost", "LivenessChecks", "LivenessTakeovers",
                   "JanitorRetires", "ApproximateNumberOfMessagesVisible", "ExecutionsStarted"):
        assert f'\\"{metric}\\"' in body, metric
    assert "alarm" in body and "p90" in body


def test_metric_methods_return_cloudwatch_metrics_in_the_workflows_namespace(synth):
    monitoring = synth.stack.instant_monitoring
    wait = monitoring.metric_wait_time()
    assert (wait.namespace, wait.metric_name, wait.statistic) == (monitoring.namespace, "WaitTime", "Average")
    assert wait.period.to_seconds() == 300
    custom = monitoring.metric_hold_time(statistic="p99", period=cdk.Duration.minutes(1))
    assert (custom.metric_name, custom.statistic, custom.period.to_seconds()) == ("HoldTime", "p99", 60)
    for method, name in [("metric_timeouts", "Timeouts"), ("metric_lost", "Lost"),
                         ("metric_liveness_checks", "LivenessChecks"),
                         ("metric_liveness_takeovers", "LivenessTakeovers"),
                         ("metric_janitor_retires", "JanitorRetires")]:
        metric = getattr(monitoring, method)()
        assert (metric.metric_name, metric.statistic) == (name, "Sum"), method


def test_cdk_nag_finds_nothing_in_the_monitoring_constructs(synth):
    ours = [m for m in synth.messages if "/InstantMonitoring/" in m.id or "/PatientMonitoring/" in m.id]
    findings = [f"{m.id}: {str(m.entry.data)[:160]}" for m in ours
                if str(m.level).endswith(("ERROR", "WARNING"))]
    assert findings == []
    # negative control: the pack did run on this stack (the workflows' own findings, suppressed
    # by the example app's nag module, are reported here)
    assert any(str(m.level).endswith("ERROR") for m in synth.messages)


def test_cfn_lint_reports_no_errors(synth):
    from cfnlint.api import lint

    errors = [m for m in lint(json.dumps(synth.synthesized.template)) if m.rule.id.startswith("E")]
    assert errors == [], [str(m) for m in errors]


# ---- validation ---------------------------------------------------------------------------------


def _workflow(stack: cdk.Stack, **props):
    from locked_workflow import Lock, LockedWorkflow
    from locked_workflow.state_machines.lock_protocol import jsonata

    return LockedWorkflow(stack, f"W{uuid.uuid4().hex[:6]}", lock=Lock.mutex(jsonata("$states.input.id")), protected=sfn.Pass(stack, f"P{uuid.uuid4().hex[:6]}"), **props)


@pytest.mark.parametrize("props, message", [
    ({"timeout_rate_threshold": 0}, "`timeout_rate_threshold` must be a share above 0 and at most 1 (or None: no alarm), got: 0"),
    ({"timeout_rate_threshold": 1.5}, "`timeout_rate_threshold` must be a share above 0 and at most 1 (or None: no alarm), got: 1.5"),
    ({"alarm_period": cdk.Duration.seconds(90)}, "`alarm_period` must be a whole number of minutes, got: 90 s"),
    ({"alarm_evaluation_periods": 0}, "`alarm_evaluation_periods` must be a whole number >= 1, got: 0"),
    ({"namespace": "AWS/States"}, "`namespace` must be 1 to 200 letters, digits or _.-/#: characters, not starting with 'AWS/', got: 'AWS/States'"),
    ({"dashboard_name": "my board"}, "`dashboard_name` must be 1 to 255 letters, digits, - or _, got: 'my board'"),
])
def test_props_are_validated_at_synth(props, message):
    stack = cdk.Stack(cdk.App())
    with pytest.raises(ValueError) as raised:
        LockMonitoring(stack, "M", workflow=_workflow(stack), **props)
    assert str(raised.value) == message


def test_a_workflow_without_logs_is_refused():
    stack = cdk.Stack(cdk.App())
    with pytest.raises(ValueError, match=r"^`workflow` must log its executions .*got: a workflow without a log group$"):
        LockMonitoring(stack, "M", workflow=_workflow(stack, logging=False))
    with pytest.raises(ValueError, match=r"^`workflow` must be a LockedWorkflow .*got: StateMachine$"):
        LockMonitoring(stack, "N", workflow=sfn.StateMachine(
            stack, "Plain", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "X"))))


def test_metrics_function_field_names_are_the_protocols():
    module = importlib.import_module("locked_workflow.lambdas.lock_metrics.index")
    assert (module.ACQUIRED_AT, module.REQUESTED_AT, module.FENCE, module.OWNER) == (
        p.ACQUIRED_AT, p.REQUESTED_AT, p.FENCE, p.OWNER)


# ---- the filter matcher itself --------------------------------------------------------------------


@pytest.mark.parametrize("pattern, line, expected", [
    ('{ $.type = "FailStateEntered" }', {"type": "FailStateEntered"}, True),
    ('{ $.type = "FailStateEntered" }', {"type": "FailStateExited"}, False),
    ('{ $.type = "Fail*" }', {"type": "FailStateEntered"}, True),
    ('{ $.v = "*:execution:*" }', {"v": '{"stale":"arn:aws:states:r:1:execution:m:n#u"}'}, True),
    ('{ $.v = "*:execution:*" }', {"v": '{"stale":null}'}, False),
    ('{ ($.a = 1) && ($.b = "x") }', {"a": 1, "b": "y"}, False),
    ('{ ($.a = 1) || ($.b = "x") }', {"a": 2, "b": "x"}, True),
    ('{ $.n >= 3 }', {"n": 3}, True),
    ('{ $.n > 3 }', {"n": "4"}, False),  # numeric comparison of a string field
    ('{ $.d.e[1] = "z" }', {"d": {"e": ["y", "z"]}}, True),
    ('{ $.missing NOT EXISTS }', {"other": 1}, True),
    ('{ $.missing = "x" || $.missing != "x" }', {"other": 1}, False),
    ('{ $.f IS NULL }', {"f": None}, True),
    ('{ $.f IS TRUE }', {"f": 1}, False),
    ("", {"anything": 1}, True),
    ('"Lock.Timeout"', {"details": {"name": "Lock.Timeout"}}, True),
])
def test_filter_matcher(pattern, line, expected):
    assert matches(pattern, json.dumps(line)) is expected


def test_filter_matcher_refuses_what_it_does_not_implement():
    with pytest.raises(UnsupportedFilterPattern):
        matches("[ip, user, ...]", "1.2.3.4 bob")
    with pytest.raises(UnsupportedFilterPattern):
        matches('{ $.a = %ab+c% }', '{"a": "abc"}')
    with pytest.raises(FilterPatternError):
        matches('{ $.a = "x" ', '{"a": "x"}')
    assert matches('{ $.a = "x" }', "not json") is False


def test_lock_states_are_found_in_every_sections_definition(synth):
    nested = synth.monitoring("Nested").lock_states
    assert set(nested.timeouts) == {"Lock.Timeout", "Inner.Timeout"}
    assert set(nested.lost) == {"Lock.Lost", "Inner.Lost"}
    assert dict(nested.acquisitions) == {"Lock.Acquire": ("TaskStateExited", "lock"),
                                         "Inner.Acquire": ("TaskStateExited", "innerLock")}
    assert ("Lock.DescribeHolder", "lockWait") in nested.takeovers  # the waiting outer section's check
    # the multi-key record gets its acquiredAt from the fences read; the record lock's read of
    # the record copies the record the acquire assigned (a second WaitTime would be wrong)
    assert dict(synth.monitoring("Keys").lock_states.acquisitions) == {"Lock.ReadFences": ("TaskStateExited", "lock")}
    assert dict(synth.monitoring("Record").lock_states.acquisitions) == {"Lock.Acquire": ("TaskStateExited", "lock")}
    synth.template.has_resource_properties("AWS::Lambda::Function", {"Environment": {"Variables": Match.object_like({
        "ACQUISITIONS": '{"Inner.Acquire":"innerLock","Lock.Acquire":"lock"}',
        "POWERTOOLS_METRICS_NAMESPACE": synth.stack.kind_monitoring["Nested"].namespace})}})

