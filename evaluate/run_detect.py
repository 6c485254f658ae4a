"""Zero-CoT Probe detection on one benchmark against its reference set.

    python evaluate/run_detect.py model.path=DIR data.path=FILE data.reference_path=FILE \
        [data.variant_paths.paraphrased=FILE] [seeds=[0,1,2]] [probe.metrics=[p_first,p_all]] [output_dir=DIR]

Writes config.yaml, records.jsonl, summary.json, table.md and c_cont.png to the run directory
(rerunning the same command resumes it) and logs to W&B (offline by default; logger=none to skip).
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate  # also registers the ${zcp.asset:...} resolver
from zcp.probe.run import run_detect


@hydra.main(config_path="../conf", config_name="detect", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="detect")  # every key typed and in range before anything is read or loaded
    run_detect(cfg)


if __name__ == "__main__":
    main()
