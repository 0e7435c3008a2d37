"""LockMonitoring of a hand-built state machine (the README's "lock part of a bigger state
machine": ``LockedSection`` + ``sfn.StateMachine`` + ``recover_stale_holders``) - the same
metrics, alarms and janitor metrics as a LockedWorkflow's, judged on the template (no
deployment: the filters themselves are judged on real log lines in test_monitoring.py)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import Duration, aws_logs as logs, aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template

from locked_workflow import Lock, LockedSection, LockMonitoring, LockTable


def orders_stack(*, log_level: sfn.LogLevel | None = sfn.LogLevel.ALL, execution_data: bool = True,
                 recover: bool = True):
    """The README's OrdersStack, its machine logging (level ALL, with execution data)."""
    stack = cdk.Stack(cdk.App(), "Orders")
    locks = LockTable(stack, "Locks")
    section = LockedSection(
        stack, "OrderLock",
        lock=Lock.mutex("{% $states.input.orderId %}"),
        table=locks,
        lease=Duration.hours(2),
        max_wait=Duration.minutes(5),
        protected=sfn.Pass.jsonata(stack, "Ship", outputs={"fence": "{% $lock.fence %}"}),
    )
    log_group = logs.LogGroup(stack, "OrdersLogs")
    machine = sfn.StateMachine(
        stack, "Orders", timeout=Duration.hours(1),
        definition_body=sfn.DefinitionBody.from_chainable(
            sfn.Pass.jsonata(stack, "Prepare").next(section).next(sfn.Pass.jsonata(stack, "Notify"))),
        logs=None if log_level is None else sfn.LogOptions(
            destination=log_group, level=log_level, include_execution_data=execution_data),
    )
    if recover:
        section.recover_stale_holders(machine)
    return stack, machine, section


def _logical_id(stack: cdk.Stack, construct) -> str:
    return stack.get_logical_id(construct.node.default_child)


def test_a_hand_built_state_machine_gets_the_workflows_metrics_alarms_and_janitor_metrics():
    stack, machine, section = orders_stack()
    monitoring = LockMonitoring(stack, "OrdersMonitoring", state_machine=machine, sections=[section])
    template = Template.from_stack(stack)
    machine_id = _logical_id(stack, machine)
    logs_id = stack.get_logical_id(stack.node.find_child("OrdersLogs").node.default_child)
    namespace = {"Fn::Join": ["", ["LockedWorkflow/", {"Fn::GetAtt": [machine_id, "Name"]}]]}

    # the section's lock states, found in the machine's definition (the other states are not)
    found = monitoring.lock_states
    assert (found.timeouts, found.lost, found.liveness_checks) == (
        ("OrderLock.Timeout",), ("OrderLock.Lost",), ("OrderLock.DescribeReader", "OrderLock.DescribeHolder"))
    assert set(found.acquisitions) == {"OrderLock.Acquire"} and set(found.releases) == {
        "OrderLock.Release", "OrderLock.ReleaseAfterError", "OrderLock.ReleaseAgain"}
    # four counts, as metric filters on the machine's own log group, in its namespace
    for metric in ("Timeouts", "Lost", "LivenessChecks", "LivenessTakeovers"):
        template.has_resource_properties("AWS::Logs::MetricFilter", {
            "LogGroupName": {"Fn::Select": [6, {"Fn::Split": [":", {"Fn::GetAtt": [logs_id, "Arn"]}]}]},
            "MetricTransformations": [Match.object_like({"MetricName": metric, "MetricNamespace": namespace})],
        })
    template.resource_count_is("AWS::Logs::MetricFilter", 4)
    template.has_resource_properties("AWS::Logs::SubscriptionFilter", {
        "LogGroupName": {"Fn::Select": [6, {"Fn::Split": [":", {"Fn::GetAtt": [logs_id, "Arn"]}]}]},
    })
    # the section's janitor publishes its retires in this namespace; its failures alarm
    janitor = section.janitor
    assert janitor is not None and monitoring.janitor is janitor
    template.has_resource_properties("AWS::Lambda::Function", {
        "Role": {"Fn::GetAtt": [_logical_id(stack, janitor.function.role), "Arn"]},
        "Environment": {"Variables": Match.object_like({"METRICS_NAMESPACE_PREFIX": "LockedWorkflow"})},
    })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
        "Dimensions": [{"Name": "QueueName",
                        "Value": {"Fn::GetAtt": [_logical_id(stack, janitor.dead_letter_queue), "QueueName"]}}],
    })
    # the Lost alarm and the timeout rate (timeouts / the machine's starts)
    assert [a.node.id for a in monitoring.alarms] == ["LostAlarm", "TimeoutRateAlarm", "JanitorFailedAlarm"]
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": namespace, "MetricName": "Lost", "Threshold": 0,
    })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Metrics": Match.array_with([Match.object_like({"Id": "started", "MetricStat": Match.object_like({
            "Metric": Match.object_like({"Namespace": "AWS/States", "MetricName": "ExecutionsStarted",
                                         "Dimensions": [{"Name": "StateMachineArn", "Value": {"Ref": machine_id}}]}),
        })})]),
    })
    template.resource_count_is("AWS::CloudWatch::Dashboard", 1)


def test_a_section_without_a_janitor_has_no_janitor_alarm():
    stack, machine, section = orders_stack(recover=False)
    monitoring = LockMonitoring(stack, "M", state_machine=machine, sections=[section])
    assert monitoring.janitor is None and monitoring.janitor_failed_alarm is None
    with pytest.raises(ValueError, match="needs a workflow with a janitor .or a section.s, from recover_stale_holders., got: none"):
        monitoring.metric_janitor_failures()
    assert [a.node.id for a in monitoring.alarms] == ["LostAlarm", "TimeoutRateAlarm"]


def test_the_hand_built_form_is_validated_at_synth():
    stack, machine, section = orders_stack()
    cases = [
        ({}, "`workflow` or `state_machine` must be given (exactly one), got: neither"),
        ({"state_machine": machine}, "`sections` must name the LockedSections of `state_machine` (at least one), got: ()"),
        ({"state_machine": machine, "sections": ["OrderLock"]},
         "`sections` must be LockedSections, got: str 'OrderLock'"),
        ({"state_machine": "Orders", "sections": [section]},
         "`state_machine` must be an sfn.StateMachine of this app, got: str 'Orders'"),
    ]
    for props, message in cases:
        with pytest.raises((TypeError, ValueError)) as raised:
            LockMonitoring(stack, f"M{len(stack.node.children)}", **props)
        assert str(raised.value) == message
    # a section of another machine
    other = LockedSection(stack, "Other", lock=Lock.mutex("{% $states.input.id %}"), table=LockTable(stack, "T"),
                          lease=Duration.hours(1), protected=sfn.Pass.jsonata(stack, "Work"))
    with pytest.raises(ValueError) as raised:
        LockMonitoring(stack, "Elsewhere", state_machine=machine, sections=[section, other])
    assert str(raised.value) == (
        "`sections` must be sections of `state_machine` (their states in its definition), got: "
        "'Orders/Other' (no state 'Other' in it)")


@pytest.mark.parametrize("log_level, execution_data, got", [
    (None, True, "no execution logs"),
    (sfn.LogLevel.ERROR, True, "level ERROR, with execution data"),
    (sfn.LogLevel.ALL, False, "level ALL, without execution data"),
])
def test_a_machine_must_log_every_event_with_its_data(log_level, execution_data, got):
    stack, machine, section = orders_stack(log_level=log_level, execution_data=execution_data)
    with pytest.raises(ValueError) as raised:
        LockMonitoring(stack, "M", state_machine=machine, sections=[section])
    assert str(raised.value) == (
        "`state_machine` must log its executions at level ALL with execution data "
        "(logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True)): "
        f"the metrics come from its execution logs, got: {got}")


def test_workflow_and_state_machine_are_exclusive():
    from locked_workflow import LockedWorkflow

    stack, machine, section = orders_stack()
    workflow = LockedWorkflow(stack, "W", lock=Lock.mutex("{% $states.input.id %}"), protected=sfn.Pass(stack, "P"))
    with pytest.raises(ValueError) as raised:
        LockMonitoring(stack, "M", workflow=workflow, state_machine=machine, sections=[section])
    assert str(raised.value) == "`workflow` or `state_machine` must be given (exactly one), got: both"
    with pytest.raises(ValueError) as raised:
        LockMonitoring(stack, "N", workflow=workflow, sections=[section])
    assert str(raised.value) == (
        "`sections` must be left unset with `workflow` (its section is read from it), got: 1 section")


def test_the_janitors_of_several_sections_are_summed_in_one_alarm():
    stack = cdk.Stack(cdk.App(), "Two")
    locks = LockTable(stack, "Locks")
    first, second = (
        LockedSection(stack, name, lock=Lock.mutex("{% $states.input.id %}"), table=locks, lease=Duration.hours(2),
                      key_namespace=name.lower(), protected=sfn.Pass.jsonata(stack, f"{name}Work"))
        for name in ("First", "Second")
    )
    machine = sfn.StateMachine(
        stack, "Machine", timeout=Duration.hours(1),
        definition_body=sfn.DefinitionBody.from_chainable(first.next(second)),
        logs=sfn.LogOptions(destination=logs.LogGroup(stack, "Logs"), level=sfn.LogLevel.ALL,
                            include_execution_data=True),
    )
    for section in (first, second):
        section.recover_stale_holders(machine)
    monitoring = LockMonitoring(stack, "M", state_machine=machine, sections=[first, second])
    assert monitoring.janitors == (first.janitor, second.janitor)
    assert set(monitoring.lock_states.lost) == {"First.Lost", "Second.Lost"}
    failures = monitoring.metric_janitor_failures()
    assert failures.expression == "FILL(janitor0, 0) + FILL(janitor1, 0)"
    queues = {name: metric.dimensions["QueueName"] for name, metric in failures.using_metrics.items()}
    assert {name: stack.resolve(q) for name, q in queues.items()} == {
        "janitor0": stack.resolve(first.janitor.dead_letter_queue.queue_name),
        "janitor1": stack.resolve(second.janitor.dead_letter_queue.queue_name),
    }
    Template.from_stack(stack).has_resource_properties("AWS::CloudWatch::Alarm", {
        "Metrics": Match.array_with([Match.object_like({"Expression": "FILL(janitor0, 0) + FILL(janitor1, 0)"})]),
        "Threshold": 0,
    })
    # one statistic for every queue
    summed = monitoring.metric_janitor_failures(statistic="Sum")
    assert {m.statistic for m in summed.using_metrics.values()} == {"Sum"}


def test_cfn_lint_reports_no_errors_in_the_hand_built_form():
    import json

    from cfnlint.api import lint

    stack, machine, section = orders_stack()
    LockMonitoring(stack, "OrdersMonitoring", state_machine=machine, sections=[section])
    errors = [m for m in lint(json.dumps(Template.from_stack(stack).to_json())) if m.rule.id.startswith("E")]
    assert errors == [], [str(m) for m in errors]


def _fair_workflow_stack(queue):
    from locked_workflow import LockedWorkflow, QueueLimit

    stack = cdk.Stack(cdk.App(), "Coalesced")
    limit = {"newest": QueueLimit.keep_newest(1), "oldest": QueueLimit.keep_oldest(2), None: None}[queue]
    workflow = LockedWorkflow(stack, "Sync", lock=Lock.fair("{% $states.input.customerId %}", queue=limit),
                              protected=sfn.Pass.jsonata(stack, "Work"))
    monitoring = LockMonitoring(stack, "SyncMonitoring", workflow=workflow)
    return Template.from_stack(stack), monitoring


@pytest.mark.parametrize("queue, metric, found", [("newest", "Superseded", "superseded"),
                                                   ("oldest", "QueueFull", "queue_full")])
def test_a_coalescing_fair_lock_counts_its_superseded_or_refused_runs(queue, metric, found):
    template, monitoring = _fair_workflow_stack(queue)
    states = getattr(monitoring.lock_states, found)
    assert states  # its Fail states, found in the definition by their Error
    template.has_resource_properties("AWS::Logs::MetricFilter", {
        "FilterPattern": Match.string_like_regexp(f'"FailStateEntered".*"{states[0]}"'),
        "MetricTransformations": [Match.object_like({"MetricName": metric})],
    })


def test_negative_control_a_plain_fair_lock_has_neither_count():
    template, monitoring = _fair_workflow_stack(None)
    assert monitoring.lock_states.superseded == () and monitoring.lock_states.queue_full == ()
    names = [t["MetricName"] for f in template.find_resources("AWS::Logs::MetricFilter").values()
             for t in f["Properties"]["MetricTransformations"]]
    assert "Superseded" not in names and "QueueFull" not in names and "Timeouts" in names
