"""A seeded slice of the randomized fault campaign (``make stress`` runs the whole of it)."""

from __future__ import annotations

import pytest

from constructs_lib.local import stress


@pytest.fixture(scope="module")
def campaign_app():
    from constructs_lib.local import LocalCloud
    from constructs_lib.local.synth import synth_app

    synthesized = synth_app(lambda app: stress.build_stack(app, "Stress"))
    with LocalCloud("moto") as cloud:
        yield cloud, cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)


def test_plan_is_seeded_and_mixes_every_shape_and_fault():
    first, again = stress.plan(200, 5, seed=11, negative_control=False), stress.plan(200, 5, seed=11, negative_control=False)
    assert [(r.shape, r.key, r.stop_after_s) for r in first] == [(r.shape, r.key, r.stop_after_s) for r in again]
    assert {r.shape for r in first} == set(stress.SHAPES)
    assert any(r.stop_after_s for r in first) and any(r.redrive for r in first)
    assert all(r.key.startswith("L") == (r.shape == "Lease") for r in first)
    assert "Unlocked" in {r.shape for r in stress.plan(200, 5, seed=11, negative_control=True)}


def test_judge_flags_each_invariant():
    runs = [stress.Run("Plain", "K0", {}, None, False, arn="a", status="FAILED", error="DynamoDB.Boom")]
    report = stress.Report(
        runs=runs,
        probe={"K0": {"violations": 1, "counter": 2, "accepted": 3, "fences": [1, 3, 2]},
               "L0": {"violations": 4, "counter": 1, "accepted": 2}},  # short lease: overlap allowed
        faults=stress.Counter(), left_held=["x#K0 by someone"],
    )
    found = stress._judge(report)
    assert {name for name, hits in found.items() if hits} == {"alone", "lost update", "fence order", "outcome", "left held"}
    assert all("L0" not in hit for hits in found.values() for hit in hits)


def test_seeded_campaign_keeps_every_invariant(campaign_app):
    cloud, app = campaign_app
    report = stress.run_campaign(cloud, app, stress.plan(60, 5, seed=2026, negative_control=False), seed=2026)
    print(stress.summary(report))
    assert report.ok, report.violations
    assert sum(i.get("entries", 0) for i in report.probe.values()) >= 50  # the work did run
    assert sum(report.faults.values()) > 0 and any(r.stop_after_s for r in report.runs)


def test_negative_control_unlocked_runs_break_the_campaign(campaign_app):
    cloud, app = campaign_app
    planned = stress.plan(40, 2, seed=7, negative_control=True)
    report = stress.run_campaign(cloud, app, planned, seed=7, settle_s=0)
    assert not report.ok
    assert report.violations["alone"] or report.violations["lost update"], report.violations
