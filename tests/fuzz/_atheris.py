"""Shared start-up of the atheris targets (run them as modules with ``PYTHONPATH=.:tests``, see README.md)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

# atheris ships no type hints; imported by name so the type checker does not need it installed.
atheris: Any = importlib.import_module("atheris")


def fuzz(test_one_input: Callable[[bytes], None]) -> None:
    """Run ``test_one_input`` under libFuzzer with the command line's options (``-runs=N``, corpus dirs)."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
