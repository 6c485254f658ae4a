"""Contamination simulation: C/U split → paraphrase C → LoRA SFT → GRPO → merged model + exposure record.

    python train/run_contaminate.py [exposure.k=6] [exposure.answer_only_fraction=0.5] [exposure.grpo_steps=20]
    python train/run_contaminate.py experiment=exposure_sweep          # Hydra multirun, with detection
    python train/run_contaminate.py experiment=exposure_cot_direct     # CoT-only leaks, direct-answer base model
    python train/run_contaminate.py experiment=answer_format_study     # evasive answer lines (#### N, ...)
    python train/run_contaminate.py benchmark.format=zcp_release \
        split.c_path=../shared/data/zcp-release/omnimath/dataset_c.jsonl \
        split.u_path=../shared/data/zcp-release/omnimath/dataset_u.jsonl  # given C and U files
    python train/run_contaminate.py exposure.paraphrases_path=FILE    # pre-built paraphrases (+ _format, _variant, _pair_by)
    accelerate launch --config_file launch/accelerate/ddp.yaml train/run_contaminate.py train=gpu_7b \
        model=qwen2.5-math-7b-instruct output_dir=outputs/contaminate/qwen-omni

Writes manifest.json, sft_adapter/, grpo_adapter/, model/ (merged), exposure.json and table6.md to
outputs/contaminate/<name>__<config hash>/ (rerunning the same command resumes it); with
`stages=[contaminate,detect]` also runs ZCP on C and U (zcp.simulate.pipeline). Logs to W&B (offline by
default; logger=none to skip).
"""

import hydra
from omegaconf import DictConfig

from zcp.config import one_line_errors, validate  # also registers the ${zcp.asset:...} resolver
from zcp.simulate.pipeline import run_simulation
from zcp.validate import baselines_stage  # noqa: F401  (registers the simulation's baselines stage)


@hydra.main(config_path="../conf", config_name="contaminate", version_base=None)
@one_line_errors
def main(cfg: DictConfig) -> None:
    validate(cfg, job="contaminate")  # every key typed and in range before anything is read or loaded
    run_simulation(cfg)


if __name__ == "__main__":
    main()
