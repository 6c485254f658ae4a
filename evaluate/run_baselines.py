"""Baseline contamination detectors (perplexity, zlib, Min-K%, Min-K%++, reference model, DPCC, prefix
reconstruction, guided instruction, ZCP's item gap) on C and U, with AUROC and benchmark decisions.

    python evaluate/run_baselines.py model.path=DIR data.path=C.jsonl [data.u_path=U.jsonl] \
        [data.reference_path=C_REF] [data.u_reference_path=U_REF] [ref_model.path=BASE] ['detectors=[ppl,mink20]']
    python evaluate/run_baselines.py run_dir=outputs/contaminate/<run>

Writes config.yaml, records.jsonl, summary.json and baselines.md to the run directory (rerunning the same
command resumes it) and logs to W&B (offline by default; logger=none to skip).
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate  # registers the ${zcp.asset:...} resolver
from zcp.validate.baselines import run_baselines  # registers the baselines_schema of conf/baselines.yaml


@hydra.main(config_path="../conf", config_name="baselines", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="baselines")  # every key typed and in range before anything is read or loaded
    run_baselines(cfg)


if __name__ == "__main__":
    main()
