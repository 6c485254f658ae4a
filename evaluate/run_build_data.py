"""Build a study's datasets: items, C/U split manifest, reference set, paraphrases of C, build report.

    python evaluate/run_build_data.py data=gsm8k reference.m=3 paraphrase.k=6 [seed=0] [output_dir=DIR]
    python evaluate/run_build_data.py data=omnimath reference=llm reference.generator.path=... \
        'reference.judges=[{path: ...}, {path: ...}]'

This lives in evaluate/ because its central product, the reference set, is the auditor's private asset
used only by detection; the split manifest and the paraphrases it also writes are consumed by training
through the manifest and the JSONL files, so training never needs to run (or see) this step.
"""

import hydra
from omegaconf import DictConfig

from zcp.benchmarks.build import build_data
from zcp.config import one_line_errors, validate  # also registers the ${zcp.asset:...} resolver


@hydra.main(config_path="../conf", config_name="build_data", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="build_data")  # every key typed and in range before anything is read or loaded
    build_data(cfg)


if __name__ == "__main__":
    main()
