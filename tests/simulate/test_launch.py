"""Launch configs: every contamination profile composes with Hydra, trainer settings are valid TRL fields,
accelerate/DeepSpeed files are consistent, the submitit launchers (local and SLURM) mirror the plugin's fields and
compose to the same jobs, and the SLURM script passes shellcheck (when installed). What these configs run is tested
in test_multiproc.py (2 processes under accelerate) and test_sweep_launcher.py (the sweep on submitit_local)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from configs import compose
from omegaconf import OmegaConf

import zcp.config  # noqa: F401  (registers ${zcp.asset:...})

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
LAUNCH = ROOT / "launch"
SBATCH = LAUNCH / "slurm" / "contaminate_7b.sbatch"
TRAIN_PROFILES = sorted(p.stem for p in (CONF / "train").glob("*.yaml"))
PAPER_MODELS = ["qwen2.5-math-7b-instruct", "qwen3-8b", "deepseek-math-7b-rl"]


def test_profiles_exist():
    assert {"cpu_tiny", "cpu_small", "gpu", "gpu_7b"} <= set(TRAIN_PROFILES)


@pytest.mark.parametrize("profile", ["cpu_small", "gpu"])
def test_small_model_profiles_fit_smollm2(profile):
    """cpu_small and gpu are sized for SmolLM2-135M (model=smollm2-135m): its context holds the SFT sequences and the
    GRPO prompt + completion, LoRA targets come from the architecture, and the trainers show their progress bar."""
    c = compose("contaminate", "model=smollm2-135m", f"train={profile}", resolve=True)
    t, m = c["train"], c["model"]
    assert t["sft"]["max_length"] <= m["max_length"] and t["grpo"]["max_completion_length"] < m["max_length"]
    assert t["lora"]["target_modules"] == "all-linear" and t["finetune"] == "lora"
    assert t["sft"]["disable_tqdm"] is False and t["grpo"]["disable_tqdm"] is False
    if profile.startswith("cpu"):  # nothing a CPU cannot run
        for group in (t["sft"], t["grpo"]):
            assert not group.get("bf16") and not group.get("gradient_checkpointing") and not group.get("use_vllm")


@pytest.mark.parametrize("profile", TRAIN_PROFILES)
def test_train_profile_composes_and_builds_trl_configs(profile, tmp_path):
    from trl import GRPOConfig, SFTConfig

    from zcp.simulate.sft import lora_config, trainer_args

    cfg = compose("contaminate", f"train={profile}")
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
    cfg = compose("contaminate", f"model={model}", "train=gpu_7b" if model != "tiny" else "train=cpu_tiny")
    m = OmegaConf.to_container(cfg.model, resolve=True)
    assert m["path"] and m["trust_remote_code"] is False
    if model != "tiny":
        assert "/" in m["path"] and m["dtype"] == "bfloat16" and m["chat"] is True and m["max_length"] >= 4096
        assert m["max_length"] >= OmegaConf.to_container(cfg.train, resolve=True)["sft"]["max_length"]


def test_exposure_sweep_composes_and_sweeps_real_knobs():
    cfg = compose("contaminate", "experiment=exposure_sweep", return_hydra_config=True)
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
    cfg = compose("contaminate", "hydra/launcher=slurm", "experiment=exposure_sweep",
                  return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.gpus_per_node >= 1 and launcher.timeout_min > 0


@pytest.mark.parametrize("name, queue", [("submitit_local", "LocalQueueConf"), ("slurm", "SlurmQueueConf")])
def test_submitit_launcher_files_mirror_the_plugin(name, queue):
    """conf/hydra/launcher/<name>.yaml has every field of the plugin's dataclass (hydra-submitit-launcher is in the
    dev extras), and any other one is a parameter submitit's executor takes (slurm.yaml's srun_args), so a field
    renamed upstream fails here, not at the start of a sweep."""
    import dataclasses

    import submitit
    from hydra_plugins.hydra_submitit_launcher import config as plugin

    conf = yaml.safe_load((CONF / "hydra" / "launcher" / f"{name}.yaml").read_text())
    fields = {f.name: f.default for f in dataclasses.fields(getattr(plugin, queue))}
    assert set(conf) >= set(fields) and conf["_target_"] == fields["_target_"]
    executor = submitit.SlurmExecutor if name == "slurm" else submitit.LocalExecutor
    assert set(conf) - set(fields) <= executor._valid_parameters()


def test_local_and_slurm_launchers_compose_to_the_same_jobs():
    """The sweep under submitit_local and under slurm: the same job config and sweep points; only the launcher
    node differs, slurm's fields a superset of the local ones (the SLURM launcher is the local one plus SLURM's)."""
    local = compose("contaminate", "hydra/launcher=submitit_local", "experiment=exposure_sweep",
                    return_hydra_config=True)
    slurm = compose("contaminate", "hydra/launcher=slurm", "experiment=exposure_sweep",
                    return_hydra_config=True)
    plain = [OmegaConf.to_container(c, resolve=False) for c in (local, slurm)]
    hydra_l, hydra_s = plain[0].pop("hydra"), plain[1].pop("hydra")
    assert plain[0] == plain[1]  # every job key, as each job will compose it
    assert hydra_l["sweeper"] == hydra_s["sweeper"] and hydra_l["callbacks"] == hydra_s["callbacks"]
    launcher_l, launcher_s = hydra_l.pop("launcher"), hydra_s.pop("launcher")
    for h in (hydra_l, hydra_s):  # the launcher's choice, where Hydra records it
        h["runtime"]["choices"].pop("hydra/launcher")
        h["overrides"]["hydra"].remove(f"hydra/launcher={'submitit_local' if h is hydra_l else 'slurm'}")
    assert hydra_l == hydra_s
    assert set(launcher_l) < set(launcher_s) and launcher_l["_target_"].endswith("LocalLauncher")
    shared = set(launcher_l) - {"_target_", "timeout_min", "cpus_per_task", "gpus_per_node", "mem_gb"}
    assert {k: launcher_l[k] for k in shared} == {k: launcher_s[k] for k in shared}  # the resources differ


ACCEL = sorted((LAUNCH / "accelerate").glob("*.yaml"))


def test_accelerate_profiles_present():
    assert {p.stem for p in ACCEL} >= {"single_gpu", "ddp", "deepspeed_zero2", "deepspeed_zero3", "cpu_2proc"}


@pytest.mark.parametrize("path", ACCEL, ids=lambda p: p.stem)
def test_accelerate_configs_are_consistent(path):
    a = yaml.safe_load(path.read_text())
    assert a["distributed_type"] in {"NO", "MULTI_GPU", "DEEPSPEED"}
    assert a["use_cpu"] is (path.stem == "cpu_2proc") and a["num_machines"] == 1
    if path.stem == "cpu_2proc":  # MULTI_GPU makes accelerate start torchrun; MULTI_CPU / --cpu would start ONE process
        assert a["distributed_type"] == "MULTI_GPU" and a["num_processes"] == 2 and a["mixed_precision"] == "no"
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


class _Zero3Engine:
    """A DeepSpeed engine as train_and_save sees it under ZeRO-3: its config and the gather of the trainable weights."""

    def __init__(self, gathered: dict) -> None:
        self.config = {"zero_optimization": {"stage": 3}}
        self.gathered, self.calls = gathered, 0

    def _zero3_consolidated_16bit_state_dict(self, exclude_frozen_parameters: bool = False) -> dict:
        assert exclude_frozen_parameters  # only the adapter: never gather the 7-8B frozen base
        self.calls += 1
        return self.gathered


@pytest.mark.parametrize("main", [True, False], ids=["rank0", "rank1"])
def test_zero3_adapter_is_gathered_on_every_rank_and_saved_by_rank0(tiny_tok, tmp_path, main):
    """Under ZeRO-3 every rank enters the gather (a collective) and rank 0 saves the gathered weights, not its own
    shards (`zcp.simulate.sft.gathered_state_dict`); DeepSpeed itself is not needed to check the wiring."""
    from types import SimpleNamespace

    import torch
    from peft import get_peft_model
    from safetensors.torch import load_file

    from zcp.core.testing import tiny_llama
    from zcp.simulate.sft import lora_config, train_and_save

    model = get_peft_model(tiny_llama(tiny_tok, hidden=16, layers=1, heads=2), lora_config(r=2))
    engine = _Zero3Engine({k: torch.full_like(v, 0.5) for k, v in model.named_parameters() if v.requires_grad})
    waits: list[int] = []
    trainer = SimpleNamespace(model=model, deepspeed=engine, is_deepspeed_enabled=True,
                              train=lambda resume_from_checkpoint=None: None,
                              accelerator=SimpleNamespace(is_main_process=main, wait_for_everyone=lambda: waits.append(1)))
    train_and_save(trainer, tmp_path / "out", tmp_path / "adapter", "SFT")
    assert engine.calls == 1 and waits == [1]
    if not main:
        assert not (tmp_path / "adapter").exists()
        return
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert {k for k in saved if "lora_B" in k} and all(bool((v == 0.5).all()) for v in saved.values())
