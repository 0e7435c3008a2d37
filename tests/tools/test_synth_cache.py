"""``synth_cache``: a test stack is synthesized once per run, and never served stale."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs

import synth_cache


def _queue_stack(app: cdk.App, name: str) -> cdk.Stack:
    stack = cdk.Stack(app, name)
    sqs.Queue(stack, "Queue")
    return stack


def test_a_second_process_reads_the_synthesized_stack_and_any_source_edit_makes_a_new_key(tmp_path, monkeypatch):
    sources = tmp_path / "src"
    (sources / "tests").mkdir(parents=True)
    (sources / "tests" / "stack.py").write_text("A = 1\n")
    monkeypatch.setattr(synth_cache, "ROOT", sources)
    monkeypatch.setattr(synth_cache, "SOURCES", ("tests",))
    monkeypatch.setenv(synth_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    synth_cache.source_digest.cache_clear()
    first = synth_cache.synth_cached(_queue_stack, "Queues")
    calls = []
    monkeypatch.setattr("locked_workflow.testing.synth.synth_app", lambda *a, **k: calls.append(a))
    second = synth_cache.synth_cached(_queue_stack, "Queues")  # another process: read, not synthesized
    assert calls == [] and second.template == first.template and second.assets_dir.is_dir()
    assert [r["Type"] for r in second.template["Resources"].values()].count("AWS::SQS::Queue") == 1
    key = synth_cache.entry_key(_queue_stack, "Queues", None)
    assert synth_cache.entry_key(_queue_stack, "Other", None) != key
    assert synth_cache.entry_key(_queue_stack, "Queues", {"x": 1}) != key
    (sources / "tests" / "stack.py").write_text("A = 2\n")  # an edit (same size, any mtime)
    synth_cache.source_digest.cache_clear()
    try:
        assert synth_cache.entry_key(_queue_stack, "Queues", None) != key
    finally:
        synth_cache.source_digest.cache_clear()
