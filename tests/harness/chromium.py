"""Headless Chromium (Debian's ``chromium`` package) for the tests of pages people look at: the admin status
page (``test_status_page.py``) and the documentation site (``test_docs_site.py``).

Chromium is not installed by the tests; without it (``MCS_TEST_CHROMIUM``, default ``/usr/bin/chromium``)
they skip. :func:`headless_args` is the command line both use: no sandbox (containers), no GPU, nothing
fetched from the network in the background, one profile directory per test.
"""

from __future__ import annotations

import os
from pathlib import Path

CHROMIUM = os.environ.get("MCS_TEST_CHROMIUM", "/usr/bin/chromium")
MISSING = not os.access(CHROMIUM, os.X_OK)
SKIP_REASON = f"{CHROMIUM} missing: apt-get install -y chromium"


def headless_args(profile: Path, *extra: str) -> list[str]:
    """Chromium's argv up to the URL: headless, quiet, with ``profile`` as its user data directory."""
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        *extra,
    ]
