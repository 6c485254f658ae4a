"""The paper's ablations of ZCP: truncation curve (Figure 2), full-CoT (Table 17), sample size (Table 18).

    python evaluate/run_ablations.py run_dir=outputs/contaminate/<run> [ablations=[truncation,full_cot,sample_size]]
    python evaluate/run_ablations.py model.path=DIR data.path=FILE data.reference_path=FILE ablations=[truncation,full_cot]

Writes cots.jsonl, truncation_records.jsonl, sample_size_subsets.jsonl, summary.json, ablations.md, truncation.png,
sample_size.png and config.yaml to outputs/ablations/<run>__<hash>/ (rerunning the same command resumes it) and
logs to W&B.
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate  # also registers the ${zcp.asset:...} resolver
from zcp.validate.ablations import run_ablations


@hydra.main(config_path="../conf", config_name="ablations", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="ablations")  # every key typed and in range before anything is read or loaded
    run_ablations(cfg)


if __name__ == "__main__":
    main()
