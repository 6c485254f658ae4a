"""Collect the runs of an exposure sweep and plot C_cont on C and U versus exposure.

    python evaluate/run_exposure_report.py [root=outputs/contaminate] [name=exposure] [out=DIR]

Reads <root>/<name>__*/exposure.json and detect/simulation_summary.json; writes exposure_report.md,
.json and .png to <root>/<name>_report (or out=DIR).
"""

import sys

from zcp.config import one_line_errors, validate
from zcp.errors import ConfigError
from zcp.validate.exposure import write_report


@one_line_errors
def main(argv: list[str]) -> None:
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise ConfigError(f"argument {bad[0]!r}: use root=DIR, name=NAME, out=DIR")
    kw = dict(a.split("=", 1) for a in argv)
    job = validate(kw, job="exposure_report")["__job__"]  # unknown arguments refused (zcp.config.jobs.ExposureReportJob)
    write_report(job.root, job.name, job.out)


if __name__ == "__main__":
    main(sys.argv[1:])
