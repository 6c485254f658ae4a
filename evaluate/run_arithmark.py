"""Generate ArithMark (5 stages x 1,000 records) and, given a model, evaluate it by log-likelihood multiple choice.

    python evaluate/run_arithmark.py                                   # data only: arithmark.jsonl
    python evaluate/run_arithmark.py model.path=/models/Qwen2.5-0.5B   # + predictions, summary.json, table.md
    python evaluate/run_arithmark.py data_path=arithmark.jsonl model.path=DIR hydra.run.dir=outputs/am

Outputs go to the Hydra run directory; rerunning with the same `hydra.run.dir` resumes the evaluation.
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate
from zcp.validate.arithmark_eval import run_arithmark


@hydra.main(config_path="../conf", config_name="arithmark", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    """Hydra entry point: all logic lives in `zcp.validate.arithmark_eval.run_arithmark`."""
    validate(cfg, job="arithmark")  # every key typed and in range before anything is read or loaded
    run_arithmark(cfg)


if __name__ == "__main__":
    main()
