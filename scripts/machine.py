"""Where and under what a benchmark ran: the checkout's commit, the machine's load, its CPU time split.

The benchmark scripts beside this file (bench_scoring.py, bench_detect_real.py) state the machine, commit and load
they ran under (figures in docs say which machine, command and date produced them). A benchmark's helper, not part
of the zcp library: reading /proc is the scripts' business, not the library's. Imported as `machine` (the scripts'
folder is on sys.path when a script runs).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any


def git_commit(cwd: str | os.PathLike[str] | None = None, short: bool = True) -> str | None:
    """HEAD's commit of the checkout at `cwd` (None: the current directory), or None outside a git checkout."""
    cmd = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return out or None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (rounded), or None where the platform has none."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine_state() -> dict[str, Any]:
    """The machine's load average and cumulative CPU time split (/proc/stat jiffies: busy, idle, steal) now, so a
    run can state the load it ran under and the share of CPU time the hypervisor took (`cpu_split`)."""
    state: dict[str, Any] = {"time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    load = load_average()
    if load is not None:
        state["loadavg"] = load
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        state["jiffies"] = {"busy": f[0] + f[1] + f[2] + f[5] + f[6], "idle": f[3] + f[4], "steal": f[7]}
    except (OSError, ValueError, IndexError):
        pass
    return state


def cpu_split(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """Shares of the machine's CPU time between two `machine_state`s: busy (any process), idle, steal."""
    if "jiffies" not in before or "jiffies" not in after:
        return {}
    d = {k: after["jiffies"][k] - before["jiffies"][k] for k in before["jiffies"]}
    total = sum(d.values()) or 1
    return {k: round(v / total, 3) for k, v in d.items()}
