"""Crash consistency as a standing suite (see ``tests/system/crash.py``).

CI runs two seeded kill points, on a SQLite store and on a PostgreSQL one;
``LMSP_CRASH_LONG=1`` runs the long form by hand (``docs/reliability.md``): 30 kill points on
one data directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Stores
from tests.system.crash import CrashRun

LONG = os.environ.get("LMSP_CRASH_LONG") == "1"
KILL_POINTS = 30 if LONG else 2
SEED = int(os.environ.get("LMSP_CRASH_SEED", "12"))


def test_nothing_a_client_was_given_is_lost_across_sigkills(tmp_path: Path, stores: Stores) -> None:
    figures = CrashRun(tmp_path, SEED, store_url=stores.new()).run(KILL_POINTS)
    print(f"\ncrash consistency on {stores.kind}, seed {SEED}: {figures}")
    assert figures.kill_points == KILL_POINTS
    assert figures.checks.tasks > 0 and figures.checks.keys > 0
    assert figures.mid_stream > 0 and figures.restarted > 0  # kills cut running tasks
