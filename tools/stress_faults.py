"""The stress campaign's faults: throttles and lost responses of the lock's writes, lost wake-ups.

Each fault is drawn at random (seeded) on the write it targets, named by the protocol modules'
update expressions, and counted in the campaign's fault log.
"""

from __future__ import annotations

import random
import threading
from collections import Counter

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import rate_protocol as rate


def campaign_faults(rng: random.Random, log: Counter) -> list:
    from locked_workflow.testing.faults import Fault

    guard = threading.Lock()

    def draw(write, probability: float, label: str):
        def when(params: dict) -> bool:
            if params.get("UpdateExpression") != write.update:
                return False
            with guard:
                hit = rng.random() < probability
                if hit:
                    log[label] += 1
            return hit
        return when

    many = 10**9
    return [
        Fault("UpdateItem", "ThrottlingException", times=many, when=draw(protocol.ACQUIRE, 0.03, "throttled acquire")),
        Fault("UpdateItem", "ThrottlingException", times=many, when=draw(protocol.RELEASE, 0.03, "throttled release")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(protocol.ACQUIRE, 0.03, "lost acquire response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(protocol.RELEASE, 0.03, "lost release response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(fair.GRANT, 0.05, "lost grant response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(fair.ENQUEUE, 0.05, "lost enqueue response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(fair.ENQUEUE_NEWEST, 0.05, "lost coalescing enqueue response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(rate.ADMIT, 0.05, "lost admission response")),
        Fault("UpdateItem", "ThrottlingException", times=many, when=draw(rate.ADMIT, 0.03, "throttled admission")),
        Fault("SendTaskSuccess", "ServiceUnavailable", times=many, service="stepfunctions",
              when=lambda params: _lost(rng, guard, log, 0.05, "lost wake-up")),
    ]


def _lost(rng: random.Random, guard: threading.Lock, log: Counter, probability: float, label: str) -> bool:
    with guard:
        hit = rng.random() < probability
        if hit:
            log[label] += 1
    return hit
