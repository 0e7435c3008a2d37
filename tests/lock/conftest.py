"""The lock deployed on the LocalCloud: the test stacks (``*_stack.py``), the helpers over their
executions' histories (``lock_invariants.py``), and the behaviour stack's fixture.

Each test module deploys the stacks it runs in a fresh LocalCloud once per DynamoDB backend
(:func:`deployed.deployed_stack`); the stacks are synthesized once per run (``synth_cache``).
"""

from __future__ import annotations

from behaviour_stack import BehaviourStack
from deployed import Deployed, deployed_stack

#: The behaviour stack in a fresh LocalCloud, once per test module and DynamoDB backend.
deployed = deployed_stack(BehaviourStack, "Behaviour", Deployed)
