"""End to end through evaluate/run_detect.py: a tiny model that memorised Dataset C is flagged on C
(C_cont(p_all) >= 0.99) and not on unseen Dataset U (< 0.75); a run killed mid-way resumes.

The script itself runs as a subprocess where the process matters (the run killed with SIGKILL); the verdicts and
the resume run the job in this process (the config the script's @hydra.main composes from the same overrides, and
the run_detect it calls), which spares a Python + torch start-up (~7 s) per run.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.core.testing import answer_only_completion, tiny_llama, train_memorizer, train_tokenizer

REPO = Path(__file__).resolve().parents[2]
NAMES = ["Ann", "Bob", "Cara", "Dan", "Eve", "Finn"]
OBJECTS = ["pens", "apples", "cards", "books", "shells"]


def _q(a: int, b: int, name: str, obj: str) -> str:
    return f"{name} has {a} {obj} and gets {b} more. How many {obj} does {name} have now?"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """100 items (C = first 50, U = last 50), m = 3 perturbed reference rows each, and a tiny model
    fully fine-tuned to answer C directly."""
    rng = random.Random(0)
    base = [
        (rng.randint(10, 99), rng.randint(10, 99), rng.choice(NAMES), rng.choice(OBJECTS)) for _ in range(100)
    ]
    items = [Item(f"q{i:03d}", _q(*b), str(b[0] + b[1])) for i, b in enumerate(base)]
    refs = []
    for i, (a, b, n, o) in enumerate(base):
        for j in range(3):
            while True:
                a2, b2 = rng.randint(10, 99), rng.randint(10, 99)
                if a2 + b2 != a + b:
                    break
            refs.append(
                Item(
                    f"q{i:03d}::ref{j}", _q(a2, b2, n, o), str(a2 + b2), metadata={"original_id": f"q{i:03d}"}
                )
            )
    tok = train_tokenizer(
        [it.question + " " + answer_only_completion(it.answer) for it in items + refs], vocab_size=400
    )
    model = tiny_llama(tok, hidden=64, layers=2, heads=4)
    # 150 full fine-tuning steps: ~15 s on an idle 2-core CPU (timing is reported, not asserted)
    train_memorizer(
        model, tok, [(it.question, answer_only_completion(it.answer)) for it in items[:50]], steps=150
    )
    root = tmp_path_factory.mktemp("e2e")
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    for name, sub in (("C", items[:50]), ("U", items[50:])):
        ids = {it.id for it in sub}
        save_items(root / f"{name}.jsonl", sub)
        save_items(root / f"{name}_ref.jsonl", [r for r in refs if r.metadata["original_id"] in ids])
    return root


def _cmd(root: Path, split: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "evaluate" / "run_detect.py"),
        f"model.path={root / 'model'}",
        f"data.path={root / split}.jsonl",
        f"data.reference_path={root / split}_ref.jsonl",
        f"data.name={split}",
        f"output_dir={out}",
        "logger=none",
        "probe.full_cot_max_tokens=40",
        *extra,
    ]


def _run_in_process(root: Path, split: str, out: Path, *extra: str) -> None:
    """What `subprocess.run(_cmd(...))` runs, minus the interpreter: the same overrides composed into conf/detect
    (as @hydra.main does) and evaluate/run_detect.py's main body (validate, then run_detect)."""
    from configs import compose

    from zcp.config import validate
    from zcp.probe.run import run_detect

    cfg = compose("detect", *_cmd(root, split, out, *extra)[2:])
    validate(cfg, job="detect")
    run_detect(cfg)


def _env() -> dict:
    return {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}


def _c(summary: dict, metric: str) -> float:
    return next(
        r["c_cont"] for r in summary["results"] if r["metric"] == metric and r["variant"] == "original"
    )


def test_memorised_c_flagged_unseen_u_not(world, tmp_path):
    root = world
    for split in ("C", "U"):
        _run_in_process(root, split, tmp_path / split)
    c = json.loads((tmp_path / "C" / "summary.json").read_text())
    u = json.loads((tmp_path / "U" / "summary.json").read_text())
    assert _c(c, "p_all") >= 0.99, c["results"]
    assert _c(u, "p_all") < 0.75, u["results"]
    assert c["verdicts"][0]["contaminated"] and not u["verdicts"][0]["contaminated"]
    recs = [json.loads(x) for x in (tmp_path / "C" / "records.jsonl").read_text().splitlines()]
    originals = [r for r in recs if r["variant"] == "original"]
    # greedy zero-CoT stopped at the brace closing the pre-filled box
    assert sum(r["correct"] for r in originals) >= 45 and all(
        r["raw_output"].endswith("}") for r in originals if r["correct"]
    )
    for name in ("config.yaml", "table.md", "c_cont.png"):
        assert (tmp_path / "C" / name).exists()


def test_killed_run_resumes(world, tmp_path):
    root = world
    out = tmp_path / "C"
    proc = subprocess.Popen(
        _cmd(root, "C", out, "run.chunk_size=8"),
        env=_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rec = out / "records.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not rec.exists() or len(rec.read_text().splitlines()) < 16):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = len(rec.read_text().splitlines())
    assert 16 <= n_before < 200, n_before
    # the rerun: the same command resumes the killed run's dir
    _run_in_process(root, "C", out, "run.chunk_size=8")
    recs = [json.loads(x) for x in rec.read_text().splitlines()]
    keys = {(r["variant"], r["original_id"], r["draw"]) for r in recs}
    assert len(recs) == len(keys) == 50 + 150
    assert _c(json.loads((out / "summary.json").read_text()), "p_all") >= 0.99
