"""What a contamination run needs, checked before any model loads, and the trainer settings it is checked on.

`check_inputs` is the contamination's part of the checks `zcp.simulate.pipeline.run_simulation` makes before the
first stage trains: answer format and rewards, files, the given split, the base model's weights and tokenizer
(`check_base_model`), the LoRA target modules against its layers (`zcp.simulate.preflight.check_lora_targets`),
leak counts (`check_exposure_counts`) and each training stage's own check
(`zcp.simulate.training_stages.check_training_stages`: for sft and grpo, the learning-rate schedule on
`_sft_settings` / the GRPO settings, since a schedule that leaves no optimizer step above a learning rate of 0
would train nothing). Each failure is one ConfigError line naming the key. `check_run_dir_writable` checks the run dir's
free space (`min_free_bytes`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from zcp.config.schemas import build
from zcp.core.items import Item
from zcp.core.rundir import MODEL
from zcp.simulate.benchmark import load_benchmark, load_split_files, planned_manifest
from zcp.simulate.rundir import DEFAULT_REWARDS, is_sham, resolve_model_path
from zcp.simulate.settings import sim_config
from zcp.simulate.train_config import TrainConfig
from zcp.simulate.training_data import (
    _examples_per_item,
    check_leak_count,
    n_clean_examples,
    n_leaked,
    n_sham_items,
    sham_training_items,
)
from zcp.simulate.training_stages import check_training_stages

MIN_FREE_MARGIN = 64 << 20  # bytes a run needs beyond its merged model (records, adapters, checkpoints of LoRA)
SFT_FIX = ("raise exposure.sft_epochs or the number of examples (exposure.k, benchmark size), lower "
           "train.sft.per_device_train_batch_size or train.sft.gradient_accumulation_steps, or lower "
           "train.sft.warmup_steps")
GRPO_FIX = "raise exposure.grpo_steps, or lower train.grpo.warmup_steps"


def check_inputs(c: Any) -> None:
    """One-line errors for settings that would otherwise fail deep inside training (before any model loads)."""
    from zcp.errors import ConfigError
    from zcp.simulate.rewards import check_answer_format, reward_funcs

    s = sim_config(c)
    ex, split = s.exposure, s.split
    try:
        check_answer_format(str(ex.answer_format))
        reward_funcs(_reward_names(s))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    needs_llm = ex.paraphraser == "llm" and int(ex.k) > 0 and (not ex.paraphrases_path or is_sham(ex))
    if needs_llm and not (s.paraphrase.model or {}).get("path"):
        raise ConfigError("exposure.paraphraser=llm needs paraphrase.model.path (a model config built through "
                          "zcp.backends.registry.build_backend; see conf/contaminate.yaml)")
    for key, value in (("exposure.paraphrases_path", ex.paraphrases_path), ("split.c_path", split.c_path),
                       ("split.u_path", split.u_path)):
        if value and not Path(resolve_model_path(str(value))).is_file():
            raise ConfigError(f"{key}={value}: no such file")
    if bool(split.c_path) != bool(split.u_path):
        raise ConfigError("split.c_path and split.u_path go together (the C file and the U file)")
    if split.c_path and (s.manifest_path or s.benchmark.source == "data"):
        raise ConfigError("split.c_path/u_path give the items and the split: do not also set manifest_path or "
                          "benchmark.source=data")
    check_base_model(s)
    from zcp.simulate.preflight import check_lora_targets, check_step_seconds

    check_lora_targets(s)  # LoRA target modules the model has (built on the meta device: no weights read)
    check_step_seconds(s)  # run.step_seconds names training stages
    items, n_c = _benchmark_and_c_size(s)
    check_exposure_counts(s, items, n_c)
    check_training_stages(s, n_c)  # each stage's own check (sft, grpo: their schedules)


def check_base_model(c: Any) -> None:
    """ConfigError (one line) unless `model.path` is a loadable base model: a local folder with config.json,
    safetensors weights (training loads safetensors only) and a tokenizer; a hub id is left to the hub."""
    from zcp.config import check_model_path
    from zcp.errors import ConfigError

    given = sim_config(c).model.path
    path = resolve_model_path(given)
    check_model_path(path)
    p = Path(path)
    if not p.is_dir():
        return
    if not (any(p.glob("*.safetensors")) or (p / "model.safetensors.index.json").is_file()):
        other = sorted(f.name for f in p.iterdir() if f.suffix in (".bin", ".pt", ".pth", ".gguf"))
        hint = (f" (it holds {', '.join(other[:3])}: save the model with safe_serialization=True)" if other
                else " (a folder with config.json only: the weights were not saved or not copied)")
        raise ConfigError(f"model.path={given}: no safetensors weights in {p}{hint}")
    if not any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ConfigError(f"model.path={given}: no tokenizer in {p} (tokenizer.json / tokenizer_config.json)")


def min_free_bytes(c: Any, run_dir: Path) -> int:
    """The free space a contamination run states it needs before it starts: the base model's size (the merged
    model it writes; times `full_finetune_copies` under full fine-tuning) plus `MIN_FREE_MARGIN`; only the margin
    once model/ exists (a hub model: its size unknown)."""
    if (run_dir / MODEL / "config.json").is_file():
        return MIN_FREE_MARGIN
    s = sim_config(c)
    base = Path(resolve_model_path(s.model.path))
    size = sum(f.stat().st_size for f in base.rglob("*") if f.is_file()) if base.is_dir() else 0
    return size * full_finetune_copies(s.train.finetune) + MIN_FREE_MARGIN


def full_finetune_copies(finetune: str) -> int:
    """Model-sized copies a run writes: 1 under LoRA (the merged model/; adapters and their LoRA checkpoints fit
    the margin); 13 under `train.finetune=full`: three full models (sft_adapter/, grpo_adapter/, model/) and, per
    stage, its newest trainer checkpoint (cpu_tiny and gpu_7b keep one: `save_total_limit: 1`; it stays after the
    stage), which holds the weights and Adam's two moments, in float32: up to twice a bfloat16 model each (1 + 4)."""
    return 3 + 2 * 5 if finetune == "full" else 1


def check_run_dir_writable(c: Any, run_dir: Path) -> None:
    """RunDirError (one line) before any model loads when the run dir cannot be written or lacks the free space
    `min_free_bytes` states (`zcp.core.io.check_writable`)."""
    from zcp.core.io import check_writable

    key = "output_dir" if sim_config(c).output_dir else "the run dir"
    check_writable(run_dir, min_free_bytes(c, run_dir), key=key)


def max_sft_examples(c: Any, n_c: int) -> int:
    """The most SFT examples the data stage can build (`build_training_data`): the trained items (round(leak_fraction
    x |C|), or the sham items) x their examples each (k variants, + the original), plus the clean examples that
    make `clean_fraction` of that. A paraphrase shortfall or a dropped item without a CoT gives fewer."""
    ex = sim_config(c).exposure
    n = n_sham_items(ex, n_c) if is_sham(ex) else n_leaked(float(ex.leak_fraction), n_c)
    n_bench = n * _examples_per_item(ex)
    return n_bench + n_clean_examples(n_bench, float(ex.clean_fraction))


def processes() -> int:
    """Training processes of this run (`WORLD_SIZE` under accelerate / torchrun, else 1)."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def _sft_settings(c: Any) -> dict[str, Any]:
    """The SFTConfig settings of the run: train.sft with the exposure knobs (epochs, learning rate) over it."""
    s = sim_config(c)
    return {**dict(s.train.sft), "num_train_epochs": float(s.exposure.sft_epochs),
            "learning_rate": float(s.exposure.lr)}


def _grpo_schedule_settings(c: Any) -> dict[str, Any]:
    """The GRPOConfig settings that decide GRPO's learning-rate schedule (train.grpo, max_steps = grpo_steps)."""
    s = sim_config(c)
    _, settings = _grpo_reward_settings(s.train)
    return {**settings, "max_steps": int(s.exposure.grpo_steps)}


def schedules(c: Any, n_sft: int) -> dict[str, Any]:
    """The SFT schedule on the run's `n_sft` examples and the GRPO schedule, as exposure.json records them."""
    from trl import GRPOConfig, SFTConfig

    from zcp.simulate.sft import lr_schedule

    out = {"sft": asdict(lr_schedule(SFTConfig, _sft_settings(c), n_sft, stage="SFT", processes=processes()))}
    if int(sim_config(c).exposure.grpo_steps) > 0:
        out["grpo"] = asdict(lr_schedule(GRPOConfig, _grpo_schedule_settings(c), None, stage="GRPO",
                                         processes=processes()))
    return out


def _benchmark_and_c_size(c: Any) -> tuple[list[Item], int]:
    """The benchmark items and |C| the split stage will give (`planned_manifest`), computed without writing anything."""
    s = sim_config(c)
    if s.given_split:
        c_items, u_items = load_split_files(s)
        return c_items + u_items, len(c_items)
    items = load_benchmark(s)
    return items, len(planned_manifest(s, items).c_ids)


def check_exposure_counts(c: Any, items: list[Item] | None = None, n_c: int | None = None) -> None:
    """One-line ConfigErrors for leak counts, before any model loads: a leak_fraction outside [0, 1] or one that
    rounds to no C item (`check_leak_count`), and a sham run (leak_fraction=0) without enough sham items
    (`sham_training_items`). Reads the benchmark (and the clean file) only when a check needs |C|; `items` and
    `n_c` (the data stage's) skip that. (The schema has refused a non-number and `exposure.sham_items` < 1.)"""
    s = sim_config(c)
    fraction = float(s.exposure.leak_fraction)
    if not 0.0 <= fraction <= 1.0 or fraction == 1.0:
        check_leak_count(fraction, 1)  # the range (all of C leaks at 1.0: no count to check)
        return
    if items is None or n_c is None:
        items, n_c = _benchmark_and_c_size(s)
    if fraction > 0.0:
        check_leak_count(fraction, n_c)
    else:
        sham_training_items(s, items, n_c, s.seed)


def _reward_names(c: Any) -> list[str]:
    """GRPO reward names: the keys of `train.rewards` (name -> weight), else the default pair."""
    rewards = sim_config(c).train.rewards
    return list(rewards) if rewards else list(DEFAULT_REWARDS)


def _grpo_reward_settings(train: TrainConfig | Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """(reward names, GRPOConfig settings) with `reward_weights` taken from `train.rewards` by name (`train`: the
    validated group, or its plain values)."""
    t = train if isinstance(train, TrainConfig) else build(TrainConfig, dict(train), "train")
    settings = dict(t.grpo)
    if not t.rewards:
        return list(DEFAULT_REWARDS), settings
    if settings.get("reward_weights") is not None:
        raise ValueError("set GRPO reward weights by name in train.rewards, not also train.grpo.reward_weights")
    settings["reward_weights"] = [float(w) for w in t.rewards.values()]
    return list(t.rewards), settings
