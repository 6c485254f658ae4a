"""The adaptive-evader study: every detector and the evader's costs for the runs of a spec, and the
suppression signals' false-positive rate on clean sets -> docs/results/evader.md (+ .json). Reads finished run
dirs (training, detections, baselines: the commands are in docs/results/evader.md); probes only the neutral set.

    python scripts/evader_study.py --spec docs/results/evader_runs.json --out docs/results/evader_tables.md \
        --clean-root outputs/contaminate --clean-root OTHER_CHECKOUT/outputs/contaminate
"""

from __future__ import annotations

import argparse
import shlex
import sys

from zcp.simulate.rundir import shipped_base_model
from zcp.validate.evader import run_study

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="JSON list of runs (zcp.validate.evader.EvaderRun fields)")
    ap.add_argument("--out", required=True, help="markdown file to write (its .json beside it)")
    ap.add_argument("--clean-root", action="append", default=[], help="contamination outputs dir with clean sets")
    ap.add_argument("--work-dir", default="outputs/evader_study", help="cache of the neutral-set probes")
    ap.add_argument("--B", type=int, default=10_000, help="Monte Carlo relabellings of the suppression tests")
    ap.add_argument("--no-models", action="store_true", help="skip the neutral-set probes (no model loads)")
    a = ap.parse_args()
    run_study(a.spec, a.out, clean_roots=a.clean_root, work_dir=a.work_dir, base_model=str(shipped_base_model()),
              B=a.B, probe_models=not a.no_models, commands=["python " + shlex.join(sys.argv)])
