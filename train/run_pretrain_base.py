"""Pretrain the embedded tiny base model from scratch on generated word problems (CPU, ~17 minutes, one thread).

    python train/run_pretrain_base.py                                  # rewrites zcp/assets/base_model/
    python train/run_pretrain_base.py seed=1 out_dir=/tmp/base max_steps=300 logger=none

Trains the BPE tokenizer (digits split) and a ~1M-parameter Llama on chain-of-thought word problems
(the reserved benchmark pool excluded), measures full-CoT accuracy on held-out items, and writes the
checkpoint with RECIPE.md and recipe.json beside it.
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate
from zcp.simulate.base_model import run_pretrain_base


@hydra.main(config_path="../conf", config_name="pretrain_base", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="pretrain_base")  # every key typed and in range before anything is read or loaded
    run_pretrain_base(cfg)


if __name__ == "__main__":
    main()
