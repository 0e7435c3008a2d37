"""A section outputs its work's output on every path (issue 25, N1): every kind, plain and
nested (re-entered on its own key where the kind is re-entrant), with the presence branch
(``detect_cancellation``, the default) and, for the mutex, without. Before the fix a
re-entered section with the presence branch passed on the Catch's error object
(``{"Error": "States.QueryEvaluationError", ...}``) to the state after it: the mutex, fair,
semaphore and multi-key cases failed."""

from __future__ import annotations

import uuid

import pytest

from outputs_stack import MACHINES, REENTRANT, expected_output, machine_name


@pytest.fixture(scope="session")
def outputs_synth():
    from outputs_stack import OutputsStack
    from locked_workflow.testing.synth import synth_app

    return synth_app(lambda app: OutputsStack(app, "Outputs"))


@pytest.fixture(scope="module")
def results(outputs_synth):
    """Every machine started at once, then awaited: ``{(kind, detect): (document, result)}``.
    Step Functions' data flow is the subject (each kind's writes run on both backends
    elsewhere): moto suffices."""
    from deployed import local_deployment

    for cloud, app in local_deployment("moto", outputs_synth):
        started = {}
        for case in MACHINES:
            document = {"key": f"{case[0]}-{uuid.uuid4().hex[:8]}", "x": uuid.uuid4().hex}
            started[case] = (document, cloud.start_execution(app.state_machine_arn(machine_name(*case)), document))
        yield {case: (document, cloud.wait_for(arn, timeout=180)) for case, (document, arn) in started.items()}


@pytest.mark.parametrize("kind,detect", MACHINES, ids=[machine_name(*c) for c in MACHINES])
def test_the_state_after_a_section_receives_the_works_output(results, kind, detect):
    document, result = results[(kind, detect)]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output == expected_output(kind, document), result.output


@pytest.mark.parametrize("kind", REENTRANT)
def test_the_nested_section_was_reentered(results, kind):
    """The output test covers the re-entered path: the inner section passed through its
    acquire and left without a release of its own."""
    _, result = results[(kind, True)]
    inner = f"{machine_name(kind, True)}Inner"
    entered = [e["stateEnteredEventDetails"]["name"] for e in result.history if e["type"].endswith("StateEntered")]
    assert f"{inner}.PassThrough" in entered and f"{inner}.LeftReentered" in entered, entered
