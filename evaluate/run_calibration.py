"""Calibration of the ZCP tests: type-I error under true nulls (simulated, real scores, a real model on
random GSM8K subsets) and power, next to the paired t-test, Wilcoxon and the old sign/bootstrap tests.

    python evaluate/run_calibration.py [data.reference_path=FILE] [parts=[simulation,joint,power]] \
        ['real_null.records=[outputs/contaminate/demo__*/detect/FT/records.jsonl]'] [logger=none] [output_dir=DIR]

Without data.reference_path part (c) is skipped (build the reference set with
`python evaluate/run_build_data.py data=gsm8k reference.m=3`); without records part (b) is. Writes
table.md, summary.md, summary.json, type1.png and power.png to outputs/calibration/<name>__<hash>/ and
logs to W&B (offline by default; logger=none to skip). See conf/calibration.yaml for the grid.
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate  # also registers the ${zcp.asset:...} resolver
from zcp.validate.calibration import run_calibration


@hydra.main(config_path="../conf", config_name="calibration", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="calibration")  # every key typed and in range before anything is read or loaded
    run_calibration(cfg)


if __name__ == "__main__":
    main()
