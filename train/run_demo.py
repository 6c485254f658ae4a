"""The main job: simulate evasive contamination of the shipped tiny model and detect it with ZCP.

    python train/run_demo.py                       # (the README's first command runs this via `make demo`)
    python train/run_demo.py exposure.answer_only_fraction=0.0   # CoT-only contamination

Splits generated word problems into C and U, paraphrases C (k = 6), LoRA SFT then GRPO, then ZCP on C
and U for the fine-tuned and the base model; prints Table 6 and Table 7 analogues and writes the plot.
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate  # also registers the ${zcp.asset:...} resolver
from zcp.simulate.pipeline import run_simulation
from zcp.validate import baselines_stage  # noqa: F401  (registers the simulation's baselines stage)


@hydra.main(config_path="../conf", config_name="demo", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="demo")  # every key typed and in range before anything is read or loaded
    run_simulation(cfg)


if __name__ == "__main__":
    main()
