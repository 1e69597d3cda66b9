"""The progress bar of ``consume``: tqdm when installed, else rich, else a plain line with rate and ETA."""

from __future__ import annotations

import io
import sys

import pytest

from multicluster_source.tools._consume import Progress


def test_tqdm_draws_done_total_and_rate() -> None:
    err = io.StringIO()
    bar = Progress(2000, err)
    bar.update(1000)
    bar.update(1000)
    bar.close()
    assert "2.00k/2.00k" in err.getvalue() and "rec/s" in err.getvalue()


def test_without_tqdm_or_rich_a_plain_line_shows_rate_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    monkeypatch.setitem(sys.modules, "rich.progress", None)
    err = io.StringIO()
    bar = Progress(10, err)
    bar.update(10)  # the last update always prints
    bar.close()
    line = err.getvalue().strip()
    assert line.startswith("10/10 records, ") and " rec/s, ETA 0 s" in line
