"""Launch configs: every contamination profile composes with Hydra, trainer settings are valid TRL fields,
accelerate/DeepSpeed files are consistent, and the SLURM script passes shellcheck (when installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import zcp.config  # noqa: F401  (registers ${zcp.asset:...})

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
LAUNCH = ROOT / "launch"
SBATCH = LAUNCH / "slurm" / "contaminate_7b.sbatch"
TRAIN_PROFILES = sorted(p.stem for p in (CONF / "train").glob("*.yaml"))
PAPER_MODELS = ["qwen2.5-math-7b-instruct", "qwen3-8b", "deepseek-math-7b-rl"]


def _compose(overrides: list[str], hydra_cfg: bool = False):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(config_name="contaminate", overrides=overrides, return_hydra_config=hydra_cfg)


def test_profiles_exist():
    assert {"cpu_tiny", "gpu_7b"} <= set(TRAIN_PROFILES)


@pytest.mark.parametrize("profile", TRAIN_PROFILES)
def test_train_profile_composes_and_builds_trl_configs(profile, tmp_path):
    from trl import GRPOConfig, SFTConfig

    from zcp.simulate.sft import lora_config, trainer_args

    cfg = _compose([f"train={profile}"])
    c = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    t = c["train"]
    ex = c["exposure"]
    # the exposure knobs default to the profile's values
    assert ex["sft_epochs"] == t["sft"]["num_train_epochs"] and ex["lr"] == t["sft"]["learning_rate"]
    assert ex["lora_r"] == t["lora"]["r"] and ex["grpo_steps"] == t["grpo"]["max_steps"]
    # every trainer field is a real SFTConfig / GRPOConfig field (cpu=True so a GPU profile builds here)
    sft = trainer_args(SFTConfig, t["sft"], output_dir=tmp_path, seed=0, report_to="none", cpu=True)
    grpo = trainer_args(GRPOConfig, t["grpo"], output_dir=tmp_path, seed=0, report_to="none", cpu=True)
    assert sft.num_train_epochs == t["sft"]["num_train_epochs"]
    assert grpo.max_steps == t["grpo"]["max_steps"] and grpo.num_generations == t["grpo"]["num_generations"]
    # GRPO's generation batch must split into whole groups
    assert (t["grpo"]["per_device_train_batch_size"] * t["grpo"].get("gradient_accumulation_steps", 1)) \
        % t["grpo"]["num_generations"] == 0
    lc = lora_config(**t["lora"])
    assert lc.r == t["lora"]["r"] and lc.lora_alpha == (t["lora"]["alpha"] or 2 * t["lora"]["r"])


@pytest.mark.parametrize("model", ["tiny", *PAPER_MODELS])
def test_model_configs_compose(model):
    cfg = _compose([f"model={model}", "train=gpu_7b" if model != "tiny" else "train=cpu_tiny"])
    m = OmegaConf.to_container(cfg.model, resolve=True)
    assert m["path"] and m["trust_remote_code"] is False
    if model != "tiny":
        assert "/" in m["path"] and m["dtype"] == "bfloat16" and m["chat"] is True and m["max_length"] >= 4096
        assert m["max_length"] >= OmegaConf.to_container(cfg.train, resolve=True)["sft"]["max_length"]


def test_exposure_sweep_composes_and_sweeps_real_knobs():
    cfg = _compose(["experiment=exposure_sweep"], hydra_cfg=True)
    assert cfg.hydra.mode.name == "MULTIRUN"
    params = dict(cfg.hydra.sweeper.params)
    assert "exposure.answer_only_fraction" in params and len(params) >= 2
    plain = OmegaConf.to_container(cfg, resolve=False)
    for key, values in params.items():
        node = plain
        for part in key.split("."):
            assert part in node, f"sweep key {key} is not in the config"
            node = node[part]
        assert len(str(values).split(",")) >= 2
    assert list(cfg.stages) == ["contaminate", "detect"]
    assert cfg.hydra.callbacks.exposure_report._target_ == "zcp.validate.exposure.ExposureReportCallback"
    assert "p_all" in cfg.probe.metrics and cfg.detect.m >= 3


def test_slurm_launcher_composes():
    cfg = _compose(["hydra/launcher=slurm", "experiment=exposure_sweep"], hydra_cfg=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.gpus_per_node >= 1 and launcher.timeout_min > 0


ACCEL = sorted((LAUNCH / "accelerate").glob("*.yaml"))


def test_accelerate_profiles_present():
    assert {p.stem for p in ACCEL} >= {"single_gpu", "ddp", "deepspeed_zero2", "deepspeed_zero3"}


@pytest.mark.parametrize("path", ACCEL, ids=lambda p: p.stem)
def test_accelerate_configs_are_consistent(path):
    a = yaml.safe_load(path.read_text())
    assert a["distributed_type"] in {"NO", "MULTI_GPU", "DEEPSPEED"}
    assert a["use_cpu"] is False and a["num_machines"] == 1
    if a["distributed_type"] == "NO":
        assert a["num_processes"] == 1
    if a["distributed_type"] == "DEEPSPEED":
        ds_path = ROOT / a["deepspeed_config"]["deepspeed_config_file"]
        ds = json.loads(ds_path.read_text())
        stage = int(path.stem[-1])
        assert ds["zero_optimization"]["stage"] == stage
        # precision and batch sizes come from the Trainer ("auto"), so the two configs cannot disagree
        assert ds["train_micro_batch_size_per_gpu"] == "auto" and ds["bf16"]["enabled"] == "auto"
        assert "mixed_precision" not in a  # set in the DeepSpeed json through the Trainer instead


def test_sbatch_script_passes_overrides_and_is_valid_bash():
    text = SBATCH.read_text()
    assert text.startswith("#!/usr/bin/env bash")
    assert "train/run_contaminate.py" in text and '"$@"' in text and "accelerate launch" in text
    assert "launch/accelerate/deepspeed_zero2.yaml" in text and (ROOT / "launch/accelerate/deepspeed_zero2.yaml").exists()
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_sbatch_script_shellcheck():
    out = subprocess.run(["shellcheck", "-x", str(SBATCH)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
