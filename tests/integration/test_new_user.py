"""A new user's own model on GSM8K, through the user guides' commands as written.

The model is one the project does not ship: a 2-layer GPT-2 (transformers GPT2LMHeadModel, tiny sizes, 512
positions) with its own byte-level BPE tokenizer and its own chat template, saved to a folder. On the first
24 rows of the shared GSM8K test file, docs/benchmarks.md's `run_build_data.py` command builds the reference set and
its GSM8K `run_detect.py` command runs detection to a verdict in summary.json. The commands are read from
the guides themselves; only paths (model, data slice, output dirs) and sizes (the full-CoT budget docs/detect.md tells a
512-position model to lower, the Monte Carlo B) are substituted. The simulation (run_contaminate with the
docs/simulate.md's smallest settings, `stages=[contaminate,detect]`) runs on the same slice and model.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from configs import compose

REPO = Path(__file__).resolve().parents[2]
# the guides holding the commands (moved from README.md): build_data and detect, then the simulation
GUIDES = "\n".join((REPO / "docs" / name).read_text() for name in ("benchmarks.md", "simulate.md"))
N_ROWS = 24
TEMPLATE = ("{% for m in messages %}### {{ m['role'] | upper }}:\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}### ASSISTANT:\n{% endif %}")
SIZES = ["probe.full_cot_max_tokens=24", "stats.bootstrap_samples=500"]  # docs/detect.md: lower it on a 512-position model


def readme_command(script: str, *must: str) -> list[str]:
    """The overrides of the guides' first `python <script>` (or `.venv/bin/python <script>`) command holding
    every string of `must` (continuation lines joined), as the shell would split them."""
    lines = GUIDES.splitlines()
    for k, line in enumerate(lines):
        if not re.match(rf"\s*(\.venv/bin/)?python {re.escape(script)}", line):
            continue
        text = line
        while text.rstrip().endswith("\\"):
            k += 1
            text = text.rstrip()[:-1] + " " + lines[k]
        text = text[text.index(script) + len(script):].split("#")[0]
        if all(m in text for m in must):
            return shlex.split(text)
    raise AssertionError(f"docs/benchmarks.md and docs/simulate.md have no {script} command with {must}")


@pytest.fixture(scope="module")
def user(tmp_path_factory, shared_data):
    """The user's model folder and GSM8K slice, and the guide's run_build_data command run on the slice."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from zcp.benchmarks.build import build_data
    from zcp.core.testing import train_tokenizer

    root = tmp_path_factory.mktemp("new_user")
    rows = (shared_data / "gsm8k" / "test.jsonl").read_text().splitlines()[:N_ROWS]
    (root / "gsm8k_slice.jsonl").write_text("\n".join(rows) + "\n")
    texts = [json.loads(r)["question"] + " " + json.loads(r)["answer"] for r in rows]
    tok = train_tokenizer(texts, vocab_size=500, chat_template=TEMPLATE)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.pad_token_id))
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    build = readme_command("evaluate/run_build_data.py", "data=gsm8k", "paraphrase.k=6")  # docs/benchmarks.md
    build_data(compose("build_data", *build, f"data.path={root / 'gsm8k_slice.jsonl'}",
                       f"output_dir={root / 'build'}"))
    return root


def _detect_overrides(root: Path) -> list[str]:
    cmd = readme_command("evaluate/run_detect.py", "data=gsm8k", "outputs/build_data/<run>/reference.jsonl")
    cmd = [x.replace("outputs/build_data/<run>", str(root / "build")).replace("model.path=DIR", f"model.path={root / 'model'}")
           for x in cmd]
    return [*cmd, f"data.path={root / 'gsm8k_slice.jsonl'}"]


def test_readme_detection_command_reaches_a_verdict_on_a_model_the_project_does_not_ship(user, capsys):
    from zcp.probe.run import run_detect

    out = user / "detect"
    summary = run_detect(compose("detect", *_detect_overrides(user), *SIZES, f"output_dir={out}"))
    assert {v["variant"] for v in summary["verdicts"]} == {"original"}
    assert isinstance(summary["verdicts"][0]["contaminated"], bool)
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["verdicts"] == summary["verdicts"] and on_disk["results"]
    covered = {json.loads(line)["original_id"] for line in (user / "build" / "reference.jsonl").read_text().splitlines()
               if line.strip()}
    no_ref = N_ROWS - len(covered)  # the builder rejects about 20% of GSM8K items: they are left out, counted
    entry = on_disk["datasets"][0]
    assert entry["n_selected"] == N_ROWS and entry["n_tested"] == N_ROWS - no_ref
    assert entry["left_out"] == ({"without a reference row": no_ref} if no_ref else {})
    assert {r["n"] for r in on_disk["results"]} == {entry["n_tested"]}
    table = (out / "table.md").read_text()
    if no_ref:
        assert f"gsm8k: n = {N_ROWS - no_ref} of {N_ROWS} items: {no_ref} without a reference row, left out" in table
    assert on_disk["rendering"]["kind"] == "chat_template" and "### ASSISTANT:" in on_disk["rendering"]["example_zero_cot"]
    assert "Prompts: the tokenizer's chat template" in capsys.readouterr().out


def test_readme_detection_command_without_the_budget_names_what_fills_the_context(user, tmp_path, monkeypatch):
    """As written, the full-CoT budget (512) does not fit a 512-position model: one line naming the budget,
    the value that fits and the policy keys; nothing is written."""
    from zcp.errors import DataError
    from zcp.probe.run import run_detect

    out = tmp_path / "run"
    with pytest.raises(DataError) as e:
        run_detect(compose("detect", *_detect_overrides(user), f"output_dir={out}"))
    msg = str(e.value)
    assert re.search(r"needs \d+: \d+ full-CoT prompt tokens \+ probe\.full_cot_max_tokens=512", msg), msg
    assert re.search(r"set probe\.full_cot_max_tokens=\d+ or less", msg) and "data.on_overflow=truncate" in msg
    assert not out.exists()


@pytest.mark.slow
def test_readme_simulation_command_on_the_users_file_and_model(user):
    """run_contaminate on the slice (benchmark.source=file) with docs/simulate.md's smallest settings, then detection."""
    from zcp.simulate.pipeline import run_simulation

    smallest = readme_command("train/run_contaminate.py", "benchmark.source=file")
    keep = ("exposure.k=", "exposure.sft_epochs=", "exposure.grpo_steps=", "exposure.clean_fraction=",
            "train.grpo.max_completion_length=", "eval.max_new_tokens=")
    sizes = [x for x in smallest if x.startswith(keep)]
    assert len(sizes) == len(keep), smallest
    out = user / "sim"
    res = run_simulation(compose("contaminate", "benchmark.source=file",
                                 f"benchmark.path={user / 'gsm8k_slice.jsonl'}", "benchmark.format=gsm8k",
                                 f"model.path={user / 'model'}", *sizes, "logger=none", f"output_dir={out}",
                                 "stages=[contaminate,detect]",
                                 f"detect.reference_path={user / 'build' / 'reference.jsonl'}",
                                 "detect.missing_reference=skip", "probe.full_cot_max_tokens=24"))
    summ = json.loads(next(out.rglob("simulation_summary.json")).read_text())
    assert res["detection"] and {r["split"] for r in summ["results"]["FT"]} == {"C", "U"}
