"""The documentation against the code: code-block markers, the pages that mirror the code, and the blocks that
need no broker (the command line's help and ``check``). The blocks that need a broker run in
``tests/integration/test_docs_examples.py`` and ``test_readme.py``; the site itself in ``test_docs_site.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import Counter

from docblocks import (
    ROOT,
    RUNNABLE,
    Block,
    all_blocks,
    argv_of,
    block_before,
    blocks,
    doc_files,
    marked_block,
    run_example,
    session,
)
from multicluster_source.framework._options import SOURCE_OPTION_KEYS
from multicluster_source.ops._metric_families import _SPECS, _Spec
from multicluster_source.tools import cli
from multicluster_source.tools import publish_metadata as publish

README = (ROOT / "README.md").read_text(encoding="utf-8")
QUICK_START = "## Quick start\n\n```bash\n./dev demo\n./dev test\n```\n"


def _runnable() -> list[Block]:
    return [b for b in all_blocks() if b.lang in RUNNABLE]


def _is_quick_start(block: Block) -> bool:
    return block.path == ROOT / "README.md" and block.code == "./dev demo\n./dev test\n"


def test_every_python_or_console_block_is_tested_or_says_why_not() -> None:
    problems = []
    for block in _runnable():
        if _is_quick_start(block):
            continue  # CI runs it: .ci/run is `./dev test`
        if block.test is None and block.reason is None:
            problems.append(f"{block.where}: ```{block.lang} block without a tested/not run marker")
        elif block.reason is not None and len(block.reason.split()) < 3:
            problems.append(f"{block.where}: 'not run' needs a reason, got {block.reason!r}")
        elif block.test is not None:
            test_file = ROOT / block.test
            if not test_file.is_file():
                problems.append(f"{block.where}: {block.test} does not exist")
            elif f'"{block.name}"' not in test_file.read_text(encoding="utf-8"):
                problems.append(f"{block.where}: {block.test} never asks for the block {block.name!r}")
    assert not problems, "\n".join(problems)


def test_every_marker_sits_right_before_a_code_block() -> None:
    marked = {(b.path, b.line - 1) for b in all_blocks() if b.marker is not None}
    for path in doc_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
            if line.startswith(("<!-- tested:", "<!-- not run:")):
                assert (path, number) in marked, f"{path}:{number}: marker not followed by a code block"


def test_python_blocks_compile() -> None:
    for block in _runnable():
        if block.lang in ("python", "py") and not block.code.startswith("--8<--"):
            compile(block.code, block.where, "exec")


def test_the_readme_is_a_landing_page() -> None:
    assert QUICK_START in README  # CI and a hook look for exactly this
    assert len(README.splitlines()) <= 150
    links = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert {"docs/getting-started.md", "docs/concepts.md", "docs/guides/index.md"} <= links
    for link in links:
        assert (ROOT / link).is_file(), link


def test_the_command_line_reference_is_the_commands_own_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "110")  # argparse wraps at the terminal width; the page shows 110
    mains = {
        "multicluster-source": cli.main,
        "python -m multicluster_source.tools.publish_metadata": publish.main,
    }
    helps = [b for b in all_blocks() if b.name == "cli-help"]
    assert len(helps) == 5
    for block in helps:
        ((command, expected),) = session(block)
        program, args = next((p, command[len(p) :].split()) for p in mains if command.startswith(p))
        with pytest.raises(SystemExit) as done:
            mains[program](args)
        assert done.value.code == 0
        assert capsys.readouterr().out.rstrip("\n").split("\n") == expected, f"{block.where}: {command}"


def test_check_on_the_getting_started_file(tmp_path: Path) -> None:
    block = marked_block("check")
    stream = next(b for b in blocks(block.path) if b.lang == "yaml")  # the file of "A first stream"
    assert "topics: [orders]" in stream.code
    (tmp_path / "streams.yaml").write_text(stream.code.replace("[orders]", "[orders, refunds]"))
    ((command, expected),) = session(block)
    done = run_example(argv_of(command), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected


def test_check_on_the_bad_file_of_the_cli_guide(tmp_path: Path) -> None:
    block = marked_block("check-bad")
    bad = block_before(block)
    assert bad.lang == "yaml"
    (tmp_path / "bad-streams.yaml").write_text(bad.code)
    ((command, expected),) = session(block)
    done = run_example(argv_of(command), tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == expected


def test_the_options_reference_lists_every_source_option() -> None:
    page = (ROOT / "docs" / "reference" / "options.md").read_text(encoding="utf-8")
    missing = [key for key in sorted(SOURCE_OPTION_KEYS) if f"| `{key}` |" not in page]
    assert not missing


@pytest.mark.parametrize("spec", list(_SPECS.values()), ids=lambda s: str(s.name))
def test_the_metrics_reference_has_every_metric_as_the_code_defines_it(spec: _Spec) -> None:
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    name = spec.name + "_total" if spec.kind is Counter else spec.name
    kind = "counter" if spec.kind is Counter else "gauge"
    labels = ", ".join(f"`{label}`" for label in spec.labels) or "none"
    assert f"| `{name}` | {kind} | {labels} | {spec.doc} |" in page
