"""SmolLM2-135M-Instruct from zcp's cache through the real entry points (opt-in: `make test-real`).

What the toy models cannot show: a real pretrained model's folder, as `make real-model` converts it, loads through
`model=smollm2-135m` (the path resolved by `${zcp.cache:...}`), its ChatML template renders the probe's prompts,
and a whole `evaluate/run_build_data.py` + `evaluate/run_detect.py` pass on 8 GSM8K test items writes a summary
with finite p_first/p_all and ids naming the split. Timings are printed (-s), never asserted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zcp.backends.real_models import model_dir, spec_of

REPO = Path(__file__).resolve().parents[2]
NAME = "smollm2-135m"  # the registry's name and conf/model/smollm2-135m.yaml
GSM8K_TEST = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
N_ITEMS = 8


@pytest.fixture(scope="module")
def folder() -> Path:
    path = model_dir(NAME)
    if not (path / "config.json").exists():
        pytest.skip(f"{path} is not converted yet: run `make real-model`")
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}


def _run(script: str, *overrides: str) -> float:
    """Run an entry point as a user does; its wall time in seconds. The whole console on failure."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(REPO / script), *overrides], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return time.perf_counter() - t0


def test_provenance_names_the_checked_gguf(folder):
    prov = json.loads((folder / "provenance.json").read_text())
    spec = spec_of(NAME)
    assert prov["gguf_sha256"] == spec.sha256 and prov["version"] == spec.version and prov["package"] == spec.package
    assert prov["model"]["architecture"] == "LlamaForCausalLM" and prov["model"]["chat_template"] is True
    assert (folder / "model.safetensors").stat().st_size > 500_000_000  # float32: 134.5 M parameters


def test_config_loads_the_cached_folder_and_renders_chatml(folder):
    from configs import compose

    from zcp.backends.base import Prompt
    from zcp.backends.registry import build_backend

    cfg = compose("detect", f"model={NAME}", "data=gsm8k")
    assert Path(cfg.model.path) == folder  # ${zcp.cache:models/...} resolved to the converted folder
    t0 = time.perf_counter()
    backend = build_backend(cfg.model)
    print(f"\nsmollm2-135m: backend built in {time.perf_counter() - t0:.1f} s")
    info = backend.rendering()
    template = backend.tokenizer.chat_template
    assert info["kind"] == "chat_template"
    assert info["template_sha256"] == hashlib.sha256(template.encode()).hexdigest()[:16]
    text = backend.render(Prompt(user="What is 2 + 3?", assistant_prefix="The final answer is: "))
    assert "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\nThe final answer is: ")


def test_detect_on_eight_gsm8k_items(folder, tmp_path):
    if not GSM8K_TEST.exists():
        pytest.skip(f"{GSM8K_TEST} is missing (the shared GSM8K data)")
    build, out = tmp_path / "build", tmp_path / "detect"
    t_build = _run("evaluate/run_build_data.py", "data=gsm8k", f"data.limit={N_ITEMS}", "reference.m=4",
                   "logger=none", f"output_dir={build}")
    t_detect = _run("evaluate/run_detect.py", f"model={NAME}", "data=gsm8k", f"data.limit={N_ITEMS}",
                    f"data.reference_path={build / 'reference.jsonl'}", "data.missing_reference=skip",
                    "probe.metrics=[p_first,p_all]", "logger=none", f"output_dir={out}")
    print(f"\nsmollm2-135m on {N_ITEMS} GSM8K items: run_build_data {t_build:.1f} s, run_detect {t_detect:.1f} s")

    summary = json.loads((out / "summary.json").read_text())
    assert summary["rendering"]["kind"] == "chat_template"
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    originals = [r for r in records if r["variant"] == "original"]
    references = [r for r in records if r["variant"] == "reference"]
    assert N_ITEMS // 2 <= len(originals) <= N_ITEMS and len(references) >= 2 * len(originals)
    assert all(r["id"].startswith("gsm8k_test-") for r in originals)  # generated ids name the split
    for r in records:
        for metric in ("p_first", "p_all"):
            assert 0.0 < r[metric] < 1.0 and math.isfinite(r[metric]), r
    assert len({r["p_first"] for r in originals}) > 1  # a real model's scores differ between questions
    assert (out / "table.md").read_text().startswith("### ZCP on gsm8k")
    print(f"p_first of the originals: {[round(r['p_first'], 3) for r in originals]}")
