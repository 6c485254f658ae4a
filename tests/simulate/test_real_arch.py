"""The simulation on a real architecture: a randomly initialised LlamaForCausalLM with SmolLM2's ChatML chat template,
special tokens and pad = eos (tests/chatml_llama.py, built here), through every stage of the demo's pipeline via the
real Hydra configs (conf/demo.yaml reduced as tests/integration/test_simulate.py does): split, data, LoRA SFT (one
step), GRPO (one step), merge, Table 6 and detection on C and U for the fine-tune and its base.

What a toy model would not show: LoRA on the Llama projections (all-linear resolved from the architecture, an explicit
list checked against its layers before anything loads), the SFT loss on the completion and its <|im_end|> when the
pad token is the eos token, the template's own system line in every rendered prompt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from chatml_llama import SMOLLM2_SYSTEM, chatml_llama
from configs import compose

os.environ["WANDB_MODE"] = "disabled"

from zcp.errors import ConfigError

PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
REDUCED = [
    "benchmark.n=16", "exposure.k=1", "exposure.sft_epochs=1", "exposure.grpo_steps=1", "eval.max_items=2",
    "eval.max_new_tokens=24", "train.grpo.max_completion_length=24", "train.grpo.per_device_train_batch_size=4",
    "train.grpo.num_generations=4", "detect.m=1", "detect.seeds=[0,1]", "stats.bootstrap_samples=200",
    "probe.full_cot_max_tokens=40", "logger=none", "run.progress=false",
    "train.sft.warmup_steps=0",  # its one SFT step must run at a learning rate above 0 (else the model is unchanged)
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return chatml_llama(tmp_path_factory.mktemp("chatml") / "model")


@pytest.fixture(scope="module")
def sim(llama, tmp_path_factory):
    from zcp.simulate.pipeline import run_simulation

    out = tmp_path_factory.mktemp("sim") / "run"
    return out, run_simulation(compose("demo", *REDUCED, f"model.path={llama}", f"output_dir={out}"))


def test_the_model_has_smollm2s_conventions(llama):
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(llama)
    cfg = AutoConfig.from_pretrained(llama)
    assert cfg.model_type == "llama" and cfg.num_key_value_heads < cfg.num_attention_heads
    assert tok.pad_token == tok.eos_token == "<|im_end|>" and tok.pad_token_id == cfg.eos_token_id
    text = tok.apply_chat_template([{"role": "user", "content": "Q?"}], tokenize=False, add_generation_prompt=True)
    assert text == (f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    for special in ("<|im_start|>", "<|im_end|>"):
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1


def test_every_stage_runs_and_detection_reports_both_models(sim):
    out, res = sim
    con = res["contamination"]
    assert con.stages_run == ["split", "data", "eval_base", "sft", "grpo", "merge", "eval_after_sft", "eval_final"]
    merged = out / "model"
    assert (merged / "model.safetensors").is_file()
    saved = json.loads((merged / "tokenizer_config.json").read_text())
    template = saved.get("chat_template") or (merged / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template and SMOLLM2_SYSTEM in template  # the merged model keeps the ChatML template
    summ = json.loads((out / "detect" / "simulation_summary.json").read_text())
    assert set(summ["results"]) == {"FT", "base"}
    manifest = json.loads((out / "manifest.json").read_text())
    for model in ("FT", "base"):
        rows = [r for r in summ["results"][model] if r["variant"] == "original"]
        assert {r["split"] for r in rows} == {"C", "U"}
        n = {r["split"]: r["n"] for r in rows if r["metric"] == "p_all"}
        assert n == {"C": len(manifest["c_ids"]), "U": len(manifest["u_ids"])}
        assert all(0.0 < r["s"] < 1.0 for r in rows if r["metric"] == "p_all")  # scored, in context
    assert len(summ["did"]) == 2 * 4


def test_lora_wraps_every_llama_projection_and_both_stages_train(sim):
    """all-linear (the profiles' default) resolves to the seven Llama projections; both adapters moved from their
    zero start (LoRA's B matrices), and the merged model differs from the base."""
    from safetensors.torch import load_file

    out, res = sim
    for stage in ("sft", "grpo"):
        cfg = json.loads((out / f"{stage}_adapter" / "adapter_config.json").read_text())
        assert {str(t).rsplit(".", 1)[-1] for t in cfg["target_modules"]} == PROJECTIONS, stage
        weights = load_file(str(out / f"{stage}_adapter" / "adapter_model.safetensors"))
        wrapped = {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in weights}
        assert wrapped == PROJECTIONS, stage
        assert any(float(v.abs().max()) > 0 for k, v in weights.items() if "lora_B" in k), stage
    base = load_file(str(Path(res["detection"]["models"]["base"]) / "model.safetensors"))
    merged = load_file(str(out / "model" / "model.safetensors"))
    key = next(k for k in base if k.endswith("self_attn.q_proj.weight"))
    assert not bool((base[key] == merged[key]).all())


def test_sft_loss_is_on_the_completion_and_its_im_end(llama, tmp_path):
    """pad = eos = <|im_end|>: the completion's <|im_end|> is still a label (TRL masks by the completion mask, not by
    the pad id), and the system line and the user turn are not."""
    from trl import SFTConfig, SFTTrainer

    from zcp.simulate.sft import load_model, load_tokenizer, peft_config_for, trainer_args

    tok = load_tokenizer(llama)
    rows = [{"prompt": [{"role": "user", "content": "Ann has 3 pens and buys 4 more. How many pens?"}],
             "completion": [{"role": "assistant", "content": "3 + 4 = 7.\n#### 7"}]}]
    from datasets import Dataset

    args = trainer_args(SFTConfig, {"max_length": 256}, output_dir=tmp_path, seed=0, report_to="none", cpu=True,
                        completion_only_loss=True)
    trainer = SFTTrainer(model=load_model(llama), args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=tok, peft_config=peft_config_for("lora", {"r": 4}))
    ex = trainer.train_dataset[0]
    labelled = [t for t, lab in zip(ex["input_ids"], ex["labels"], strict=True) if lab != -100]
    text = tok.decode(labelled)
    assert text.startswith("3 + 4 = 7.\n#### 7<|im_end|>"), text
    assert SMOLLM2_SYSTEM not in text and "Ann has" not in text


def test_lora_targets_the_model_lacks_are_refused_before_anything_loads(llama, tmp_path):
    """GPT-2's layer names on a Llama: one line naming the key and the model's own linear layers, before any
    stage runs (once, peft failed inside the SFT stage after the data and the base evaluation were done)."""
    from zcp.simulate.pipeline import run_simulation

    out = tmp_path / "run"
    for targets in ("[c_attn,c_proj]", "[q_proj,qproj]"):
        with pytest.raises(ConfigError) as e:
            run_simulation(compose("demo", *REDUCED, f"model.path={llama}", f"output_dir={out}",
                                   f"train.lora.target_modules={targets}"))
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("train.lora.target_modules=") and "q_proj" in msg, msg
        assert "down_proj" in msg.split("linear layers:")[1]
    assert not out.exists() or not any(out.iterdir())
