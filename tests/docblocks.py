"""The code blocks of the documentation (README.md, docs/, configmap-examples/README.md) and their markers.

Every Python or console block carries a marker on the line right before its opening fence:

- ``<!-- tested: tests/<file>.py (<name>) -->``: that test runs the block as written (it finds it with
  :func:`marked_block`); the same name may mark identical copies on several pages;
- ``<!-- not run: <reason> -->``: the block is not run, for the reason given (Python blocks are still
  compiled by ``tests/unit/test_docs.py``).

The one exception is the README's ``## Quick start`` block, which CI itself runs (``.ci/run``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Fence languages whose blocks must be run by a test or say why not.
RUNNABLE = frozenset({"python", "py", "pycon", "console", "bash", "sh", "shell"})
MARKER = re.compile(r"^<!-- (?:tested: (?P<test>\S+) \((?P<name>[a-z0-9-]+)\)|not run: (?P<reason>.+)) -->$")
_FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_-]*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a documentation page."""

    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None  # the marker line right before the fence, when there is one
    test: str | None
    name: str | None
    reason: str | None

    @property
    def where(self) -> str:
        """``path:line`` relative to the repository, for assertion messages."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    """Every page whose blocks are checked."""
    return [
        ROOT / "README.md",
        ROOT / "configmap-examples" / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
    ]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{path}:{i + 1}: unclosed code block")
        before = lines[i - 1] if i > 0 else ""
        marker = MARKER.match(before)
        out.append(
            Block(
                path=path,
                line=i + 1,
                lang=fence.group("lang"),
                code="\n".join(lines[i + 1 : end]) + "\n",
                marker=before if before.startswith("<!--") else None,
                test=marker.group("test") if marker else None,
                name=marker.group("name") if marker else None,
                reason=marker.group("reason") if marker else None,
            )
        )
        i = end + 1
    return out


def all_blocks() -> list[Block]:
    """The blocks of every documentation page."""
    return [b for path in doc_files() for b in blocks(path)]


def marked_block(name: str) -> Block:
    """The block marked ``tested: ... (name)``; copies on several pages must be identical."""
    found = [b for b in all_blocks() if b.name == name]
    assert found, f"no block is marked as tested by {name!r}"
    first = found[0]
    for other in found[1:]:
        assert other.code == first.code, f"{other.where} differs from {first.where}, both marked {name!r}"
    return first


def block_before(block: Block) -> Block:
    """The block right before ``block`` on its page (e.g. the file a console session reads)."""
    page = blocks(block.path)
    index = next(i for i, b in enumerate(page) if b.line == block.line)
    assert index > 0, f"{block.where}: no block before it"
    return page[index - 1]


def session(block: Block) -> list[tuple[str, list[str]]]:
    """A console block as (command without ``$ ``, expected output lines)."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.code.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"{block.where}: output before the first command"
            commands[-1][1].append(line)
    return commands


def argv_of(command: str) -> list[str]:
    """The argv that runs a command of a console block with this interpreter and this tree's package."""
    argv = shlex.split(command)
    if argv[0] == "multicluster-source":
        return [sys.executable, "-m", "multicluster_source", *argv[1:]]
    assert argv[0] == "python", command
    return [sys.executable, *argv[1:]]


def run_example(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd`` as a reader of the docs would, importing this tree's package."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "110"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=cwd, check=False)


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a Python block in a fresh interpreter in ``cwd``."""
    return run_example([sys.executable, "-c", code], cwd)
