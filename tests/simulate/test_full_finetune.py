"""`train.finetune=full` (for the CoT-only ladder): SFT and GRPO train every weight (no PEFT), each stage's folder
holds a full model, the merge stage / Table 6 / resume read it as they read adapters; the option composes, is
checked, and leaves the run directory of a default (LoRA) config where it was."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from configs import compose

from zcp.errors import ConfigError


def test_finetune_composes_is_checked_and_full_is_another_run():
    from zcp.config.schemas import validate
    from zcp.simulate.rundir import _run_dir
    from zcp.simulate.settings import sim_config

    default = compose("contaminate", "experiment=paper_recipe", resolve=True)
    assert default["train"]["finetune"] == "lora"
    full = compose("contaminate", "experiment=paper_recipe", "train.finetune=full", resolve=True)
    validate(full, job="contaminate")
    assert sim_config(full).train.finetune == "full"
    assert _run_dir(default) != _run_dir(full)  # full fine-tuning is another run
    with pytest.raises(ConfigError, match=r"train\.finetune"):
        validate(compose("contaminate", "experiment=paper_recipe", "train.finetune=half", resolve=True),
                 job="contaminate")


def test_ladder_experiment_composes_each_rung():
    from zcp.config.schemas import validate
    from zcp.simulate.settings import sim_config

    rungs = {}
    for rung in ("r1", "r2", "r3"):
        c = compose("contaminate", "experiment=paper_recipe_ladder", f"+ladder_rung={rung}",
                    "exposure.leak_fraction=0", resolve=True)
        validate(c, job="contaminate")
        s = sim_config(c)
        rungs[rung] = (s.exposure.sft_epochs, s.exposure.lora_r, s.train.finetune, s.exposure.lr,
                       s.train.grpo["learning_rate"], s.exposure.leak_fraction, s.benchmark.n)
    profile = compose("contaminate", resolve=True)["train"]
    assert rungs["r1"] == (60, profile["lora"]["r"], "lora", profile["sft"]["learning_rate"],
                           profile["grpo"]["learning_rate"], 0.0, 40)
    assert rungs["r2"][:3] == (60, 64, "lora") and rungs["r2"][3:] == rungs["r1"][3:]
    assert rungs["r3"][:3] == (60, profile["lora"]["r"], "full")
    assert rungs["r3"][3] < rungs["r1"][3] and rungs["r3"][4] < rungs["r1"][4]  # full FT: a lower learning rate


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    import torch

    from zcp.benchmarks.wordproblems import generate_word_problems, render_solution
    from zcp.core.testing import tiny_llama, train_tokenizer

    torch.set_num_threads(1)
    items = generate_word_problems(30, seed=5)
    tok = train_tokenizer([t for it in items for t in (it.question, render_solution(it))], vocab_size=300)
    model = tiny_llama(tok, hidden=32, layers=1, heads=2)
    path = tmp_path_factory.mktemp("tiny_base")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _cfg(base: Path, out: Path) -> dict:
    return {
        "seed": 0, "name": "full", "output_dir": str(out),
        "benchmark": {"source": "wordproblems", "n": 8, "seed": 5, "id_prefix": "wp"},
        "split": {"c_fraction": 0.5, "stratify_by": None},
        "model": {"path": str(base), "dtype": "float32"},
        "exposure": {"k": 2, "paraphraser": "auto", "leak_fraction": 1.0, "answer_only_fraction": 0.0,
                     "clean_fraction": 0.0, "sft_epochs": 2, "lr": 1e-3, "lora_r": 4, "grpo_steps": 2},
        "train": {
            "finetune": "full", "torch_threads": 1,
            "sft": {"per_device_train_batch_size": 4, "logging_steps": 1, "save_steps": 2, "max_length": 256,
                    "disable_tqdm": True},
            "grpo": {"per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8,
                     "learning_rate": 1e-3, "logging_steps": 1, "save_steps": 1, "disable_tqdm": True},
        },
        "eval": {"max_items": 2, "max_new_tokens": 8},
        "logger": {"mode": "disabled"},
    }


@pytest.fixture(scope="module")
def run(tiny_base, tmp_path_factory):
    from zcp.simulate.contaminate import contaminate

    cfg = _cfg(tiny_base, tmp_path_factory.mktemp("contaminate") / "run")
    return cfg, contaminate(cfg)


def test_full_finetune_trains_every_weight_and_saves_full_models(run, tiny_base):
    import torch
    from safetensors.torch import load_file

    from zcp.simulate.sft import adapter_done, is_full_model

    _, r = run
    assert r.stages_run == ["split", "data", "eval_base", "sft", "grpo", "merge", "eval_after_sft", "eval_final"]
    base = load_file(tiny_base / "model.safetensors")
    sft = load_file(r.sft_adapter_dir / "model.safetensors")
    grpo = load_file(r.grpo_adapter_dir / "model.safetensors")
    final = load_file(r.model_dir / "model.safetensors")
    for d in (r.sft_adapter_dir, r.grpo_adapter_dir):
        assert is_full_model(d) and adapter_done(d) and not (d / "adapter_config.json").exists()
    # no LoRA anywhere: every base key is there, and the weights a LoRA never touches moved too
    assert set(sft) == set(base) and not any("lora_" in k for k in final)
    for key in ("model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                "model.layers.0.self_attn.q_proj.weight"):
        assert not torch.equal(sft[key], base[key]), f"{key} did not train"
    # the merge stage saves the last stage's full model: model/ is GRPO's output exactly
    assert all(torch.equal(final[k], grpo[k]) for k in grpo)
    t6 = json.loads((r.run_dir / "table6.json").read_text())
    assert t6["stages"] == ["base", "after_sft", "final"]


def test_full_finetune_resumes(run, caplog):
    from safetensors.torch import load_file

    from zcp.simulate.contaminate import contaminate

    cfg, r = run
    assert contaminate(cfg).stages_run == []  # every stage done: nothing reruns
    done = load_file(r.sft_adapter_dir / "model.safetensors")
    shutil.rmtree(r.sft_adapter_dir)  # killed after the last checkpoint, before the model was saved
    assert list((r.run_dir / "sft").glob("checkpoint-*"))
    with caplog.at_level(logging.INFO, logger="zcp.simulate.sft"):
        again = contaminate(cfg)
    assert again.stages_run == ["sft"]
    assert any("resuming from" in m and "checkpoint-" in m for m in caplog.messages)
    redone = load_file(r.sft_adapter_dir / "model.safetensors")
    assert redone.keys() == done.keys() and all(redone[k].equal(done[k]) for k in done)


def test_the_free_space_check_counts_a_full_fine_tune_s_model_copies(tmp_path):
    """The run states the space it needs before training: one model copy under LoRA (the merged model/), 13 under
    full fine-tuning (three saved models and two stages' checkpoints with Adam's moments), plus the margin."""
    from zcp.simulate.checks import MIN_FREE_MARGIN, min_free_bytes

    lora = min_free_bytes(compose("contaminate", resolve=True), tmp_path) - MIN_FREE_MARGIN
    full_cfg = compose("contaminate", "train.finetune=full", resolve=True)
    full = min_free_bytes(full_cfg, tmp_path) - MIN_FREE_MARGIN
    assert lora > 0 and full == 13 * lora
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert min_free_bytes(full_cfg, tmp_path) == MIN_FREE_MARGIN  # model/ written: done
