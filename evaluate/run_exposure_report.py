"""Collect the runs of an exposure sweep and plot C_cont on C and U versus exposure.

    python evaluate/run_exposure_report.py [root=outputs/contaminate] [name=exposure] [out=DIR]

Reads <root>/<name>__*/exposure.json and detect/simulation_summary.json; writes exposure_report.md,
.json and .png to <root>/<name>_report (or out=DIR).
"""

import sys

from zcp.exposure import write_report


def main(argv: list[str]) -> None:
    kw = dict(a.split("=", 1) for a in argv)
    unknown = set(kw) - {"root", "name", "out"}
    if unknown:
        raise SystemExit(f"unknown argument(s) {sorted(unknown)}; use root=, name=, out=")
    write_report(kw.get("root", "outputs/contaminate"), kw.get("name", "exposure"), kw.get("out"))


if __name__ == "__main__":
    main(sys.argv[1:])
