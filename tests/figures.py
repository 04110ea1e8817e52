"""Figures that tests measure on the way (fault recovery, fuzzing counts): printed always, saved on request.

`make figures` runs the tests that measure them with SESSIONSEARCH_SAVE_FIGURES=1, which keeps them
in bench/results/<file>.json, one section per test; an ordinary test run leaves the tree as it was.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"


def record(file: str, section: str, figures: dict[str, Any]) -> None:
    """Print one test's figures; with SESSIONSEARCH_SAVE_FIGURES=1 also keep them in bench/results/<file>.json."""
    print(f"\n{file} / {section}: {json.dumps(figures)}")
    if os.environ.get("SESSIONSEARCH_SAVE_FIGURES") != "1":
        return
    path = RESULTS / f"{file}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[section] = {**figures, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    data["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
