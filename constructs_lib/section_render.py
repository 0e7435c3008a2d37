"""What a locked section checks and adds when it is rendered: only then are the sections
enclosing it known (re-entrancy, variable clashes) and the protected work complete (its stop
grace, the guard on its tasks, its ``Done`` assignment). The section's Parallel
(:class:`SectionState`) runs these at render; :class:`NotInExpress` refuses what parks on a task
token in an EXPRESS state machine.
"""

from __future__ import annotations

import threading
from typing import Any, List, Mapping, Optional, Protocol, Sequence

import jsii
from aws_cdk import Stack, aws_dynamodb as dynamodb, aws_stepfunctions as sfn
from constructs import Construct, IValidation

from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.section_record import named_states, rendered_definition, state_names
from locked_workflow.constructs_lib.section_work import branches, guard_task, work_tasks
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import jsonata


class RenderedSection(SectionContext, Protocol):
    """What the render-time checks read of a section (a
    :class:`~locked_workflow.constructs_lib.locked_section.LockedSection`), beyond what its
    kind may read."""

    lock_variable: str
    #: JSONata: the stored key (or keys), from the kind.
    stored_key_expression: str
    #: The section's states by name and role (its lock states: the work's tasks are guarded,
    #: these not).
    state_record: Any
    #: Its Parallel (a :class:`SectionState`).
    section_state: Any
    #: Its waiters park on a task token.
    parks: bool

    def stop_grace_ms(self, rendered_section: Optional[Any] = ..., lock_states: set = ...) -> int: ...


# Sections being rendered, outermost first: a section rendered inside another one's branch
# learns here which sections enclose it (re-entrancy, variable clashes).
_rendering = threading.local()


def enclosing_sections() -> list:
    """The sections being rendered around the one rendered now, outermost first."""
    return list(getattr(_rendering, "stack", []))


class SectionState(sfn.Parallel):
    """The section's Parallel: its Arguments are known only when it is rendered, because
    only then is it known which sections enclose it."""

    def __init__(self, scope: Construct, construct_id: str, *, section: RenderedSection, **props: Any):
        super().__init__(scope, construct_id, **props)
        #: The section this state is the Parallel of.
        self.section = section
        #: Paths of the state machines whose definition rendered this state.
        self.machines: set = set()
        #: The sections nested in this one, by their Parallel's name (known once rendered).
        self.nested: dict = {}

    def to_state_json(self, *args: Any) -> Any:
        enclosing = enclosing_sections()
        self.machines |= machines_being_built(self)
        problem = nesting_problem(self.section, enclosing)
        if problem:  # at synth: the state machine's definition is rendered
            raise ValueError(problem)
        stack = getattr(_rendering, "stack", [])
        frames = getattr(_rendering, "inside", [])
        for frame in frames:  # rendered inside each section being rendered
            frame.append(self.section)
        stack.append(self.section)
        frames.append([])
        _rendering.stack, _rendering.inside = stack, frames
        try:
            rendered = dict(super().to_state_json(*args))
        finally:
            stack.pop()
            inside = frames.pop()
        self.nested = nested_sections(rendered, inside)
        lock_states = lock_state_names(self.section, self.nested)
        grace = self.section.stop_grace_ms(rendered, lock_states)
        rendered["Arguments"] = jsonata(entry_expression(self.section, enclosing, grace))
        assign_work_done(self.section, rendered, grace)
        problem = concurrent_reentry_problem(self.section, rendered, self.nested)
        if problem:
            raise ValueError(problem)
        guard_work(self.section, rendered, lock_states)
        return rendered


def nesting_problem(section: RenderedSection, enclosing: Sequence[RenderedSection]) -> str:
    """A clash of ``section``'s variables with an enclosing section's ('' if none)."""
    for outer in enclosing:
        clash = set(section.variables.values()) & set(outer.variables.values())
        if clash:
            return (
                f"`lock_variable` must differ from that of the enclosing section "
                f"{outer.node.path!r} (an inner scope may not assign an outer scope's "
                f"variable), got: {section.lock_variable!r} (clashing: {sorted(clash)})"
            )
    return ""


def entry_expression(section: RenderedSection, enclosing: Sequence[RenderedSection], grace_ms: int) -> str:
    """JSONata: the section's entry record (its Parallel's Arguments), given the sections
    enclosing it; the kind refuses a nesting it cannot run first (``check_nesting``)."""
    on_my_table = [s for s in enclosing if same_table(s.table, section.table)]
    section.kind.check_nesting(section, on_my_table)
    return protocol.section_entry_expression(
        key_expression_=section.stored_key_expression,
        enclosing_lock_variables=[s.lock_variable for s in reversed(on_my_table)],
        grace_ms=grace_ms,
        key_field=section.kind.key_field,
        holds_same_lock=section.kind.holds_same_lock,
        extra_fields=section.kind.entry_fields([s.lock_variable for s in reversed(on_my_table)]),
    )


def machines_being_built(scope: Construct) -> set:
    """Paths of the state machines of ``scope``'s stack whose definition is being rendered now:
    an ``sfn.StateMachine`` renders its definition in its constructor, before it adds its
    ``CfnStateMachine`` (its child ``Resource``)."""
    return {
        m.node.path for m in Stack.of(scope).node.find_all()
        if isinstance(m, sfn.StateMachine) and m.node.try_find_child("Resource") is None
    }


def nested_sections(rendered_section: Mapping[str, Any], rendered_inside: Sequence[RenderedSection]) -> dict:
    """``Parallel name -> section`` of the sections nested in a rendered section: those
    rendered while it was, whose Parallel (by the name their record holds) is a state of its
    branch. State names are unique in a definition: no two nested sections share one."""
    names = set()
    for branch in rendered_section.get("Branches", []):
        names |= state_names(branch)
    return {s.state_record.section_name: s for s in rendered_inside if s.state_record.section_name in names}


def lock_state_names(section: RenderedSection, nested: Mapping[str, RenderedSection]) -> set:
    """The names of the lock's own states in ``section``'s rendered branch: its recorded
    states and those of the sections nested in it."""
    names = set(section.state_record.names())
    for inner in nested.values():
        names |= inner.state_record.names()
    return names


def concurrent_reentry_problem(section: RenderedSection, rendered_section: dict,
                               nested: Mapping[str, RenderedSection]) -> str:
    """Re-entrancy is for sequential nesting only. A section nested in this one's work that
    could pass through on this section's lock (same table and namespace, neither a lock on
    records) must not run as concurrent children of one hold - iterations of a Map, or
    sections in two branches of a Parallel: each would pass through, and all would be
    inside at once with the same fence, which no fenced writer can tell apart. Such a shape
    is refused ("" if there is none). ``nested``: the sections nested in it, by their
    Parallel's name (:func:`nested_sections`)."""

    def could_pass_through(name: str, state: Mapping[str, Any]) -> "RenderedSection | None":
        inner = nested.get(name) if state.get("Type") == "Parallel" else None
        if (inner is not None and same_table(inner.table, section.table)
                and inner.key_namespace == section.key_namespace
                and not inner.kind.lives_on_records and not section.kind.lives_on_records):
            return inner
        return None

    def found(states: Mapping[str, Any]) -> "RenderedSection | None":
        """The first section in ``states`` (at any depth) that could pass through."""
        for name, state in states.items():
            inner = could_pass_through(name, state)
            if inner is not None:
                return inner
            for branch in branches(state):
                inner = found(branch.get("States", {}))
                if inner is not None:
                    return inner
        return None

    def problem(states: Mapping[str, Any]) -> str:
        for name, state in states.items():
            children = branches(state)
            if state.get("Type") == "Map" and state.get("MaxConcurrency") != 1:
                inner = found(children[0].get("States", {})) if children else None
                if inner is not None:
                    return _concurrent_message(section, inner, f"the iterations of Map {name!r}")
            elif state.get("Type") == "Parallel" and len(children) > 1:
                hits = [found(b.get("States", {})) for b in children]
                hits = [h for h in hits if h is not None]
                if len(hits) > 1:
                    return _concurrent_message(section, hits[0], f"the branches of Parallel {name!r}")
            for branch in children:
                inner_problem = problem(branch.get("States", {}))
                if inner_problem:
                    return inner_problem
        return ""

    for branch in rendered_section.get("Branches", []):
        message = problem(branch.get("States", {}))
        if message:
            return message
    return ""


def assign_work_done(section: RenderedSection, rendered_section: dict, grace_ms: int) -> None:
    """The protected work, when it succeeds, assigns ``<lock_variable>Done``
    (``lock_protocol.work_done_expression``: now + the stop grace, and the redrive generation
    it ended in), which a release resumed by a redrive reads to tell its own earlier write
    from a takeover. In the work's own state (the lock's Parallel, or the user's lone task):
    no state transition more."""
    (branch,) = rendered_section["Branches"]
    work = branch["States"][section.protected.state_id]
    assign = work.setdefault("Assign", {})
    if not isinstance(assign, dict) or section.variables["done"] in assign:
        raise ValueError(
            f"`protected` must leave its Assign an object without {section.variables['done']!r} (the lock "
            f"assigns it), got: {assign!r}"
        )
    assign[section.variables["done"]] = jsonata(protocol.work_done_expression(grace_ms))


def guard_work(section: RenderedSection, rendered_section: dict, lock_states: set) -> None:
    """Make every task of the protected work check, before it runs, that this section's
    acquisition belongs to the execution's current redrive generation
    (``lock_protocol.resumed_guard_expression``): a redrive resumes a branch at its
    unsuccessful step, past the acquire. The lock's own states (this section's and nested
    sections', ``lock_states``: :func:`lock_state_names`) are owner-conditioned writes and
    reads, safe at any time, and stay as they are; a nested section's work gets this guard on
    top of its own."""
    guard = protocol.resumed_guard_expression(section.lock_variable)
    for name, state in work_tasks(rendered_section, lock_states):
        guard_task(name, state, guard)


def same_table(a: dynamodb.ITable, b: dynamodb.ITable) -> bool:
    """Whether ``a`` and ``b`` are the same DynamoDB table."""
    if a is b:
        return True
    return Stack.of(a).resolve(a.table_name) == Stack.of(b).resolve(b.table_name)


def _concurrent_message(outer: RenderedSection, inner: RenderedSection, where: str) -> str:
    return (
        f"a section nested in {outer.node.path!r} on the same table and `key_namespace` must not "
        f"run in {where}: concurrent children of one hold would all re-enter it at once "
        f"(re-entrancy is for sequential nesting), got: {inner.node.path!r} in {where}. Give the "
        f"inner section another `key_namespace`, or set the Map's max_concurrency to 1"
    )


@jsii.implements(IValidation)
class NotInExpress:
    """What parks on a task token - a fair lock's waiters (but ``polling=True``), a read/write
    lock's (``Lock.shared`` / ``Lock.exclusive``), a hold's presence task
    (``detect_cancellation``) - cannot run in an EXPRESS state machine
    (https://docs.aws.amazon.com/step-functions/latest/dg/integrate-optimized.html: EXPRESS
    supports Request Response only): found at synth, in the definitions of the stack's EXPRESS
    state machines."""

    def __init__(self, section: RenderedSection) -> None:
        self.section = section

    def in_express_machine(self) -> Optional[str]:
        """The path of an EXPRESS state machine of the stack that runs the section, or ``None``:
        one whose definition rendered the section's Parallel (see :func:`machines_being_built`);
        a ``CfnStateMachine`` made without an ``sfn.StateMachine``, one whose definition has a
        Parallel of that name (state names are unique in a definition; another machine's
        section of the same id would be taken for this one: refused, never let through)."""
        stack = Stack.of(self.section)
        name = self.section.state_record.section_name
        for machine in stack.node.find_all():
            if not (isinstance(machine, sfn.CfnStateMachine)
                    and stack.resolve(machine.state_machine_type) == "EXPRESS"):
                continue
            owner = machine.node.scope
            if isinstance(owner, sfn.StateMachine):
                runs_it = owner.node.path in self.section.section_state.machines
            else:
                runs_it = any(n == name and state.get("Type") == "Parallel" for n, state in named_states(
                    rendered_definition(stack.resolve(machine.definition_string)).get("States", {})))
            if runs_it:
                return machine.node.path
        return None

    def validate(self) -> List[str]:
        section = self.section
        machine = self.in_express_machine()
        if machine is None:
            return []
        where = f"{section.node.path!r} in {machine!r}"
        if section.parks and section.kind.express_form is not None:
            return [
                f"`lock` must be {section.kind.express_form} in an EXPRESS state machine (its "
                f"waiters would park on a task token, which EXPRESS cannot), got: Lock.{section.lock.kind}(key) "
                f"for {where}"
            ]
        if section.parks:
            return [
                f"`lock` must not be Lock.{section.lock.kind} in an EXPRESS state machine (its waiters "
                f"park on a task token, which EXPRESS cannot; use a STANDARD machine, or Lock.mutex / "
                f"Lock.fair(key, polling=True)), got: Lock.{section.lock.kind}(key) for {where}"
            ]
        return [
            f"`detect_cancellation` must be False for a section in an EXPRESS state machine "
            f"(it cannot park on a task token), got: True for {where}"
        ]
