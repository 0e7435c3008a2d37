"""The lock kinds' state builders: one module per kind, each wiring its protocol module
(:mod:`locked_workflow.state_machines`) into a section's states, behind one declared contract
(:mod:`~locked_workflow.constructs_lib.kinds.base`: :class:`KindBuilder`, the traits and hooks
of a kind; :class:`SectionContext`, what a section gives it). Each kind module also declares
the kind's *value* (:mod:`~locked_workflow.constructs_lib.kinds.value`: what ``Lock.<factory>``
returns, its settings and their validation), which ``Lock``'s factory delegates to.

- ``mutex`` (``Lock.mutex``): one holder per key;
- ``semaphore`` (``Lock.semaphore``): N holders per key;
- ``multikey`` (``Lock.keys``): every key of a list, all or nothing;
- ``record`` (``Lock.on_record``): the lock on the protected record itself;
- ``fair`` + ``fair_queue``, ``fair_handoff`` (``Lock.fair``): a mutex with a FIFO queue and
  wake-up handoff;
- ``shared`` + ``shared_states``, ``shared_liveness``, ``shared_handoff``, ``shared_hold``
  (``Lock.shared`` / ``Lock.exclusive``): a read/write lock;
- ``ticket_queue``: the waiters' path of both queueing kinds (ticket, park, look, claim,
  requeue, leave), built once; each of them declares a ``QueueDriver`` (what "my turn" and
  "granted" mean, and the writes that spell them: ``fair_queue.FairQueueDriver``,
  ``shared.SharedQueueDriver``);
- ``rate`` (``Lock.rate``): at most ``limit`` entries per key in any window of ``period``
  (with ``at_once``: and a semaphore's slots).
"""
