"""``python -m multicluster_source``: the command line (see :mod:`multicluster_source.tools.cli`)."""

from __future__ import annotations

import sys

from multicluster_source.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
