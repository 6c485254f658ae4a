"""Helpers of the launch tests (tests/simulate/test_multiproc.py, test_sweep_launcher.py): a tiny base model
built locally, the Hydra overrides of a tiny contamination run, and the entry point started as a subprocess
(one process, `accelerate launch` on two CPU processes, or a Hydra multirun), timed, its output kept in a log.

Everything runs through train/run_contaminate.py, the command a user types, so the test covers the entry point,
Hydra and the launcher as well as the pipeline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY = REPO / "train" / "run_contaminate.py"
CPU_2PROC = REPO / "launch" / "accelerate" / "cpu_2proc.yaml"
AUDIT = REPO / "tests" / "simulate" / "rank_audit.py"
ACCELERATE = Path(sys.executable).with_name("accelerate")


def _quick_pretrain(model, tok, items, steps: int = 70) -> None:
    """Full fine-tuning of the random model on `question -> final-answer line`, so its samples are near-format."""
    import torch

    from zcp.core.answers import final_answer_line

    convs = [tok.apply_chat_template([{"role": "user", "content": it.question},
                                      {"role": "assistant", "content": final_answer_line(it.answer)}], tokenize=False)
             for it in items]
    enc = tok(convs, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    labels = ids.masked_fill(mask == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(ids), (16,), generator=g)
        model(input_ids=ids[idx], attention_mask=mask[idx], labels=labels[idx]).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def build_tiny_base(path: Path) -> Path:
    """A 2-layer, 64-wide llama with a 400-token BPE vocabulary, briefly pre-trained on word problems (~10 s)."""
    from zcp.benchmarks.wordproblems import generate_word_problems, render_solution, reword_word_problem
    from zcp.core.testing import tiny_llama, train_tokenizer

    items = generate_word_problems(60, seed=5)
    texts = []
    for it in items:
        texts += [it.question, render_solution(it), *(v.question for v in reword_word_problem(it, 3, 0))]
    tok = train_tokenizer(texts, vocab_size=400)
    model = tiny_llama(tok, hidden=64, layers=2, heads=4)
    _quick_pretrain(model, tok, items)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def tiny_overrides(base: Path, *, accumulation: int = 1, sft_epochs: int = 4, grpo_steps: int = 2,
                   k: str = "2") -> list[str]:
    """Hydra overrides of a tiny contamination run on `base` (conf/contaminate.yaml, train=cpu_tiny).

    12 SFT examples (4 leaked items x k=2 paraphrases, half answer-only, + 4 clean) in batches of 2 per device
    x `accumulation`: with two processes and accumulation 1 the global batch is 4, as with one process and
    accumulation 2. The sampler is `random` (transformers' seedable sampler, reseeded per epoch, sharded by
    accelerate: the same example order in both set-ups); the profile's group_by_length groups by
    batch x accumulation, which differs between them. GRPO: one prompt x 8 completions per device and step.
    A checkpoint every step (resume after a kill). `k` may be a sweep ("1,2") for a Hydra multirun."""
    return [
        f"model.path={base}", "model.dtype=float32", "name=t", "seed=0",
        "benchmark.n=12", "benchmark.seed=5", "benchmark.id_prefix=wp", "split.c_fraction=0.5",
        f"exposure.k={k}", "exposure.leak_fraction=0.67", "exposure.answer_only_fraction=0.5",
        "exposure.clean_fraction=0.34", f"exposure.sft_epochs={sft_epochs}", "exposure.lr=1e-2", "exposure.lora_r=4",
        f"exposure.grpo_steps={grpo_steps}",
        "train.sft.per_device_train_batch_size=2", f"train.sft.gradient_accumulation_steps={accumulation}",
        "train.sft.warmup_steps=0", "train.sft.save_steps=1", "train.sft.logging_steps=1", "train.sft.disable_tqdm=true",
        "train.sft.train_sampling_strategy=random",
        "train.grpo.per_device_train_batch_size=8", f"train.grpo.gradient_accumulation_steps={accumulation}",
        "train.grpo.num_generations=8", "train.grpo.max_completion_length=16", "train.grpo.save_steps=1",
        "train.grpo.logging_steps=1", "train.grpo.disable_tqdm=true",
        "eval.max_items=2", "eval.max_new_tokens=16",
    ]


def launch_env(**extra: str) -> dict[str, str]:
    """The subprocess environment: W&B offline (nothing leaves the machine), no hub, one thread per process."""
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", "WANDB_SILENT": "true", "PYTHONPATH": str(REPO)}
    env.update(extra)
    return env


def command(overrides: list[str], *, processes: int = 1, audit: bool = False) -> list[str]:
    """train/run_contaminate.py with `overrides`: plain python (1 process) or `accelerate launch` with
    launch/accelerate/cpu_2proc.yaml (2 processes, gloo), optionally through tests/simulate/rank_audit.py."""
    script = [str(AUDIT), str(ENTRY)] if audit else [str(ENTRY)]
    if processes == 1:
        return [sys.executable, *script, *overrides]
    return [str(ACCELERATE), "launch", "--config_file", str(CPU_2PROC), "--num_processes", str(processes),
            *script, *overrides]


@dataclass
class Launched:
    """A finished subprocess: its exit status, wall seconds and log."""

    returncode: int
    seconds: float
    log: str


def run_logged(cmd: list[str], log: Path, *, cwd: Path, env: dict[str, str], timeout: float = 1800) -> Launched:
    """Run `cmd` to the end with stdout+stderr in `log`; returns its status, time and output."""
    t0 = time.time()
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
    return Launched(rc, round(time.time() - t0, 1), log.read_text())


def rank_pids(launcher_pid: int) -> dict[int, int]:
    """rank -> pid of the worker processes of an `accelerate launch` (the torchrun agent runs inside the launcher
    and starts the workers as its children; their RANK variable names them). Only direct children running the
    entry point count: a rank's own children (W&B's service process) inherit its RANK."""
    import psutil

    out = {}
    for child in psutil.Process(launcher_pid).children(recursive=False):
        try:
            env, cmdline = child.environ(), " ".join(child.cmdline())
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if "RANK" in env and ENTRY.name in cmdline:
            out[int(env["RANK"])] = child.pid
    return out


def newest_checkpoint(trainer_dir: Path) -> int:
    """The step of the newest complete checkpoint-N (with its trainer_state.json) under a trainer dir, else 0."""
    steps = [int(d.name.split("-")[1]) for d in trainer_dir.glob("checkpoint-*")
             if d.name.split("-")[1].isdigit() and (d / "trainer_state.json").is_file()]
    return max(steps, default=0)
