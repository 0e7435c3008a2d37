"""The rate limit (``Lock.rate``) at synth: its props refused with typed errors, the default
``max_wait`` the history budget allows, a refused run's read-again, the ADMIT write spelled once,
``at_once`` validated, and the monitoring's reading of its record. (Its runs on both DynamoDB
backends: ``test_rate_limit.py``.)"""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.state_machines.lock_protocol import jsonata
from rate_stack import LIMIT


# ---- props ----------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0, -1, 1001, True, 2.5, "3"])
def test_a_bad_limit_is_refused_at_synth(limit):
    with pytest.raises(ValueError, match=r"`limit` must be a whole number from 1 to 1000, got: "):
        Lock.rate(jsonata("$states.input.key"), limit=limit)


@pytest.mark.parametrize("seconds", [0, 0.5, 1.5, 86_401])
def test_a_bad_period_is_refused_at_synth(seconds):
    with pytest.raises(ValueError, match=r"`period` must be whole seconds from 1 s to 1 day, got: "):
        Lock.rate(jsonata("$states.input.key"), limit=3, period=cdk.Duration.millis(int(seconds * 1000)))


def test_a_bad_key_template_is_refused_at_synth():
    with pytest.raises(ValueError, match="`key`"):
        Lock.rate("customer-1", limit=3)


def _section(lock: Lock, max_wait: cdk.Duration) -> LockedSection:
    stack = cdk.Stack(cdk.App(), "S")
    return LockedSection(
        stack, "Limited", lock=lock, table=LockTable(stack, "Locks"), lease=cdk.Duration.minutes(5),
        protected=cdk.aws_stepfunctions.Pass(stack, "Work"), max_wait=max_wait,
    )


def test_a_wait_that_could_outgrow_the_history_is_refused_at_synth():
    many = Lock.rate(jsonata("$states.input.key"), limit=1000, period=cdk.Duration.seconds(1))
    with pytest.raises(ValueError, match=r"`max_wait` must keep the wait under 20000 history events .* "
                                         r"Lock.rate\(limit=1000\)"):
        _section(many, cdk.Duration.minutes(15))
    # the bound counts the admissions a run may lose to within its max_wait: this one fits
    assert rate.worst_case_events(limit=10, period_s=60, max_wait_s=900) < 20_000
    _section(Lock.rate(jsonata("$states.input.key"), limit=10), cdk.Duration.minutes(15))


def _longest_fitting_s(events_of) -> int:
    """The longest whole-second wait, up to the section's 15 minutes, whose worst case fits
    the default history budget (by brute force, from the worst-case functions)."""
    return max(s for s in range(0, 901) if events_of(s) <= p.WAIT_LOOP_EVENT_BUDGET)


def _rate_states(section: LockedSection):
    """The states of a state machine around ``section`` as synthesized (those of its Parallels'
    branches too), as a template whose one resource's ``States`` they are: Match looks into them."""
    from aws_cdk import aws_stepfunctions as sfn
    from aws_cdk.assertions import Template
    from locked_workflow.constructs_lib.monitoring_states import synthesized_definition

    stack = cdk.Stack.of(section)
    machine = sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(section))
    Template.from_stack(stack).resource_count_is("AWS::StepFunctions::StateMachine", 1)
    flat: dict = {}

    def walk(states: dict) -> None:
        for name, state in states.items():
            flat[name] = state
            for branch in state.get("Branches", []):
                walk(branch["States"])

    walk(synthesized_definition(machine)["States"])
    return Template.from_json({"Resources": {"Definition": {"Type": "Definition", "Properties": {"States": flat}}}})


@pytest.mark.parametrize("lock_props,events_of", [
    ({"limit": 100}, lambda s: rate.worst_case_events(limit=100, period_s=60, max_wait_s=s)),
    ({"limit": 10, "at_once": 2}, lambda s: rate.worst_case_events(limit=10, period_s=60, max_wait_s=s)
     + p.worst_case_wait_events(p.WaitPolicy(), s, 2)),
])
def test_the_default_max_wait_is_the_longest_the_history_budget_allows(lock_props, events_of):
    """The section's default ``max_wait`` (15 minutes) could outgrow the history of these rate
    limits: left unset, it is the longest wait that fits (the slot's wait loop counted with
    ``at_once``), and the Choice and the timeout use it. A longer explicit one is refused."""
    from aws_cdk.assertions import Match

    longest_s = _longest_fitting_s(events_of)
    assert 60 < longest_s < 900 and events_of(900) > p.WAIT_LOOP_EVENT_BUDGET  # 15 minutes would not fit
    lock = Lock.rate(jsonata("$states.input.key"), **lock_props)
    stack = cdk.Stack(cdk.App(), "S")
    section = LockedSection(stack, "Limited", lock=lock, table=LockTable(stack, "Locks"),
                            lease=cdk.Duration.minutes(5), protected=cdk.aws_stepfunctions.Pass(stack, "Work"))
    assert section.max_wait_ms == longest_s * 1000
    in_time = {"Type": "Choice", "Choices": [Match.object_like({
        "Condition": jsonata(rate.past_max_wait_expression(section.variables["wait"], longest_s * 1000))})]}
    timeout = "RateTimeout" if "at_once" in lock_props else "Timeout"
    _rate_states(section).has_resource_properties("Definition", {"States": Match.object_like({
        section.state_name("InTime?"): Match.object_like(in_time),
        section.state_name(timeout): Match.object_like({
            "Type": "Fail", "Cause": Match.string_like_regexp(rf"after max_wait \({longest_s * 1000} ms\)")}),
    })})
    with pytest.raises(ValueError, match=rf"`max_wait` must keep the wait under 20000 history events .*"
                                         rf"got: {longest_s + 1}\.0 s"):
        _section(lock, cdk.Duration.seconds(longest_s + 1))
    _section(lock, cdk.Duration.seconds(longest_s))  # the longest fits when given
    with pytest.raises(ValueError, match=r"`max_wait` must keep the wait under 20000 history events .*got: 900\.0 s"):
        _section(lock, cdk.Duration.minutes(15))  # the default's length, given: refused
    # a workflow (its default timeout, 1 hour, leaves the section's default) gets it too
    stack = cdk.Stack(cdk.App(), "W")
    workflow = LockedWorkflow(stack, "Limited", lock=lock, protected=cdk.aws_stepfunctions.Pass(stack, "Work"))
    assert workflow.section.max_wait_ms == longest_s * 1000


def test_a_refused_run_reads_again_at_once_or_apart_from_the_others_before_its_permit_frees():
    """A refused ADMIT goes to a Wait (``Spread``) and then reads again: 0 s when the permit it
    read was free already (no delay when permits are there), else a random whole number of
    seconds up to half the way to that permit and at most ``SPREAD_MAX_S`` - so runs refused
    together in a burst read again apart, each before the permit it read frees."""
    import time

    from aws_cdk.assertions import Match
    from locked_workflow.testing.patches.jsonata_evaluator import evaluate

    section = _section(Lock.rate(jsonata("$states.input.key"), limit=10), cdk.Duration.minutes(5))
    name = section.state_name
    _rate_states(section).has_resource_properties("Definition", {"States": Match.object_like({
        name("Admit"): Match.object_like({"Catch": [Match.object_like({
            "ErrorEquals": ["DynamoDB.ConditionalCheckFailedException"], "Next": name("Spread")})]}),
        name("Spread"): {"Type": "Wait", "QueryLanguage": "JSONata", "Next": name("Read"),
                         "Seconds": jsonata(rate.spread_seconds_expression(section.variables["wait"]))},
    })})

    def draws(ahead_s: float) -> list[int]:
        now = int(time.time() * 1000)
        seen = {rate.SEEN_N: 3, rate.PERMIT_AT: now + int(ahead_s * 1000), rate.LAST: 0, rate.SINCE: now, rate.ROUNDS: 1}
        return [evaluate(rate.spread_seconds_expression("w"), {"w": seen}) for _ in range(60)]

    assert set(draws(-5)) == {0}  # the permit read was free: read again at once
    far, near = draws(120), draws(20)
    assert all(isinstance(s, int) and 0 <= s <= rate.SPREAD_MAX_S for s in far) and len(set(far)) > 5
    assert all(0 <= s <= 10 for s in near) and max(near) > 0  # half the way to the permit, at most


def test_the_admit_write_is_spelled_once_and_names_what_it_uses():
    assert rate.ADMIT.value_names() == (":now", ":next", ":n", ":cutoff")
    assert set(rate.attribute_names("permit0")) == {"#slot", f"#{rate.ADMITTED_AT}", f"#{rate.ADMISSIONS}"}
    assert rate.rate_key(p.namespaced("r", "k")) == "~rate~r#k"
    # the Python reading of an item is the state machine's: slot n mod limit + period, the last stamp
    item = {rate.ADMISSIONS: {"N": "4"}, "permit1": {"N": "1000"}, rate.ADMITTED_AT: {"N": "9000"}}
    assert rate.permit_at_ms(item, limit=3, period_ms=6000) == (4, 1000 + rate.spacing_ms(6000), 9000)
    assert rate.permit_at_ms(item, limit=4, period_ms=6000) == (4, 0, 9000)  # slot 0: never used
    assert rate.permit_at_ms({}, limit=3, period_ms=6000) == (0, 0, 0)


# ---- with a concurrency limit (at_once) ----------------------------------------------------


def test_at_once_is_validated_at_synth():
    for bad in (0, 33, True, 1.5, "2"):
        with pytest.raises(ValueError, match=r"`at_once` must be a whole number from 1 to 32 \(or None: no "
                                             r"concurrency limit\), got: "):
            Lock.rate(jsonata("$states.input.key"), limit=3, at_once=bad)
    # a concurrency limit adds the slot's wait loop to the rate's rounds in the history budget
    few = Lock.rate(jsonata("$states.input.key"), limit=10, at_once=2)
    _section(few, cdk.Duration.minutes(10))
    with pytest.raises(ValueError, match=r"`max_wait` must keep the wait under 20000 history events"):
        _section(Lock.rate(jsonata("$states.input.key"), limit=1000, period=cdk.Duration.seconds(1), at_once=2),
                 cdk.Duration.minutes(15))


def test_monitoring_finds_the_rate_limits_wait_and_timeout_in_its_record():
    """``LockMonitoring`` reads a rate limit as every kind, from the section's record: its ADMIT
    assigns the lock record (``WaitTime`` = reserved time - the section's entry: the wait for a
    permit), its Timeout fails ``Lock.Timeout`` (``Timeouts``); nothing is held, so no release
    (no ``HoldTime``)."""
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedWorkflow
    from locked_workflow.constructs_lib.monitoring_states import LockStates, synthesized_definition
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = cdk.Stack(cdk.App(), "RateRecord")
    workflow = LockedWorkflow(stack, "Rate", lock=Lock.rate(jsonata("$states.input.key"), limit=LIMIT),
                              protected=sfn.Pass.jsonata(stack, "Work"))
    states = LockStates.recorded(synthesized_definition(workflow.state_machine), [workflow.section])
    assert states.timeouts == ("Lock.Timeout",)
    assert set(states.acquisitions) == {"Lock.Admit"} and states.releases == {}
    assert states.liveness_checks == ()

