"""The reST cross-reference roles of our docstrings, as the documentation site shows them.

The docstrings are written for Sphinx and pdoc (``:class:`~a.b.Lock```); mkdocstrings renders
the role's name literally before the code (``:class:<code>~a.b.Lock</code>``). The site's hook
(``tools/mkdocs_hooks.py``, ``on_page_content``) passes each page through :func:`plain_roles`,
which keeps the code and drops the role, shortening a ``~``-prefixed target to its last name as
Sphinx does.
"""

from __future__ import annotations

import re

#: A rendered role: its name, then the code mkdocstrings made of its target.
RENDERED_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj|const|ref):<code>(~?)([^<]+)</code>")


def plain_roles(html: str) -> str:
    """``html`` with every rendered role turned into its target's code."""

    def code(match: re.Match) -> str:
        short, target = match.groups()
        return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"

    return RENDERED_ROLE.sub(code, html)
