"""The detector study report: ZCP and the baselines on verbatim and paraphrased leaks, plus the ablations.

    python evaluate/run_report.py experiment=detector_study
    python evaluate/run_report.py report.paraphrased.run_dir=outputs/contaminate/<run> \
        report.paraphrased.ablations_dir=outputs/ablations/<dir> report.paraphrased.baselines_dir=<dir>

Writes report.md, report.json and PNG plots to outputs/report/study__<hash>/ (or output_dir=DIR) and logs to W&B.
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate  # also registers the ${zcp.asset:...} resolver
from zcp.validate.study import run_report


@hydra.main(config_path="../conf", config_name="report", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="report")  # every key typed and in range before anything is read or loaded
    run_report(cfg)


if __name__ == "__main__":
    main()
