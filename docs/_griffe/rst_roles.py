"""A griffe extension for the API reference: the package's docstrings use reStructuredText roles.

``:class:`~pkg.Name``` and ``:meth:`open``` become Markdown code spans (``Name``, ``open``; ``~`` keeps the
last dotted part, as Sphinx does) and a paragraph ending in ``::`` (a literal block follows) ends in ``:``;
the indented block after it is a Markdown code block already. Loaded by mkdocs.yml (mkdocstrings, python
handler, ``extensions``); it changes only what the site shows, never the code.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")
_LITERAL = re.compile(r"(?<=\S)::$", re.M)


def _code(match: re.Match[str]) -> str:
    target = match.group("target")
    if match.group("tilde"):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def plain_markdown(text: str) -> str:
    """``text`` with reStructuredText roles as code spans and ``::`` paragraph ends as ``:``."""
    return _LITERAL.sub(":", _ROLE.sub(_code, text))


class RstRoles(Extension):
    """Rewrites each docstring once its object is loaded."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        """Rewrite the docstring of each object griffe loads (module, class, function, attribute)."""
        if obj.docstring is not None:
            obj.docstring.value = plain_markdown(obj.docstring.value)
