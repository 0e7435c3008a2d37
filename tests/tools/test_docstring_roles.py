"""The documentation site shows a docstring's reST role as its target's code, not the role's name."""

from tools.docstring_roles import plain_roles


def test_a_rendered_role_becomes_its_targets_code_and_a_tilde_keeps_the_last_name():
    html = (
        "<p>See :class:<code>~locked_workflow.constructs_lib.lock.Lock</code> and "
        ":mod:<code>locked_workflow.state_machines.lock_protocol</code>; "
        ":meth:<code>mutex</code>'s key. A time: 12:30 <code>x</code>.</p>"
    )
    assert plain_roles(html) == (
        "<p>See <code>Lock</code> and <code>locked_workflow.state_machines.lock_protocol</code>; "
        "<code>mutex</code>'s key. A time: 12:30 <code>x</code>.</p>"
    )
