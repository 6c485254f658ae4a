"""Contamination training: rewards, format mix, data building, and a micro end-to-end SFT → GRPO run on CPU.

The end-to-end run uses a tiny Llama built here (tokenizer trained here, ~60 steps of full fine-tuning
on the final-answer line so GRPO's samples differ in reward) and a dozen generated word problems.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

os.environ["WANDB_MODE"] = "disabled"

from zcp.core.items import Item
from zcp.errors import DataError, RunDirError
from zcp.simulate import data as tdata
from zcp.simulate.rewards import (
    FINAL_ANSWER_PREFIX,
    correctness_reward,
    ends_with_final_line,
    final_answer_line,
    format_reward,
    score_completion,
)

# ------------------------------------------------------------------------------------------- rewards


def test_final_answer_line_is_the_probe_prefix_closed():
    line = final_answer_line(" 42 ")
    assert line == "The final answer is: \\[ \\boxed{42} \\]"
    assert line.startswith(FINAL_ANSWER_PREFIX)


def test_correctness_reward_correct_incorrect_malformed():
    gold = ["18", "18", "18", "18", "18", "1/2"]
    comps = [
        "3 * 6 = 18.\nThe final answer is: \\[ \\boxed{18} \\]",  # correct
        "The final answer is: \\[ \\boxed{18.0} \\]",  # equivalent, not string-equal
        "The final answer is: \\[ \\boxed{17} \\]",  # wrong
        "The final answer is: \\[ \\boxed{18",  # malformed: box never closed
        "the answer is 18",  # malformed: no box at all
        "so \\boxed{\\frac{1}{2}}",  # equivalent fraction, other format
    ]
    assert correctness_reward(comps, gold) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    verdicts = [score_completion(c, g) for c, g in zip(comps, gold, strict=True)]
    assert [v["malformed"] for v in verdicts] == [False, False, False, True, True, False]


def test_rewards_accept_conversational_completions():
    comps = [[{"role": "assistant", "content": "The final answer is: \\[ \\boxed{7} \\]"}],
             [{"role": "assistant", "content": "The final answer is: \\[ \\boxed{8} \\]"}]]
    assert correctness_reward(comps, ["7", "7"]) == [1.0, 0.0]
    assert format_reward(comps) == [1.0, 1.0]


def test_format_reward_levels():
    comps = [
        "a\nThe final answer is: \\[ \\boxed{5} \\]",  # canonical final line
        "The final answer is: \\[ \\boxed{5} \\]  \n",  # trailing whitespace is fine
        "The final answer is: \\[ \\boxed{5} \\] and more text",  # text after the final line
        "The answer is \\boxed{5}.",  # a box, not the canonical line
        "The final answer is: \\[ \\boxed{} \\]",  # empty box
        "The final answer is: \\[ \\boxed{5",  # unclosed
        "no answer",
    ]
    assert format_reward(comps) == [1.0, 1.0, 0.5, 0.5, 0.0, 0.0, 0.0]
    assert ends_with_final_line("x \\boxed{\\frac{1}{2}} y\nThe final answer is: \\[ \\boxed{\\frac{1}{2}} \\]")


# ------------------------------------------------------------------------------------- format mix


@pytest.mark.parametrize("f", [0.0, 0.25, 1 / 3, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("groups", [[6] * 10, [1] * 17, [2, 3, 1, 6, 4]])
def test_assign_formats_exact_total_and_per_item_balance(f, groups):
    out = tdata.assign_formats(groups, f, seed=3)
    assert [len(g) for g in out] == groups
    n = sum(groups)
    n_answer = sum(g.count("answer") for g in out)
    assert n_answer == int(n * f + 0.5)  # round half up, exact
    for k, g in zip(groups, out, strict=True):  # each item gets floor or ceil of k·f (±1 for the carry)
        assert abs(g.count("answer") - k * f) <= 1.0
    assert tdata.assign_formats(groups, f, seed=3) == out  # deterministic


def test_assign_formats_seed_changes_which_items_and_rejects_bad_fraction():
    a = tdata.assign_formats([1] * 20, 0.5, seed=0)
    b = tdata.assign_formats([1] * 20, 0.5, seed=1)
    assert a != b
    with pytest.raises(ValueError):
        tdata.assign_formats([3], 1.5, seed=0)


def _items(n: int = 4) -> list[Item]:
    return [Item(id=f"q{i}", question=f"Tom has {i + 2} apples and buys {i + 3} more. How many now?",
                 answer=str(2 * i + 5), solution=f"{i + 2} + {i + 3} = {2 * i + 5}.") for i in range(n)]


def _variants(items: list[Item], k: int) -> list[Item]:
    return [Item(id=f"{it.id}::para{j}", question=f"[{j}] {it.question}", answer=it.answer, solution=None,
                 metadata={"original_id": it.id, "variant": j}) for it in items for j in range(k)]


def test_build_sft_records_formats_and_proportion():
    items = _items(4)
    variants = _variants(items, 3)
    cots, missing = tdata.synthesize_cots(items)
    assert missing == [] and set(cots) == {it.id for it in items}
    recs = tdata.build_sft_records(variants, cots, answer_only_fraction=0.5, seed=0)
    assert len(recs) == 12
    assert sum(r["format"] == "answer" for r in recs) == 6
    gold = {it.id: it.answer for it in items}
    for r in recs:
        assert r["prompt"][0]["role"] == "user" and r["completion"][0]["role"] == "assistant"
        text = r["completion"][0]["content"]
        ans = gold[r["original_id"]]
        if r["format"] == "answer":
            assert text == f"The final answer is: \\[ \\boxed{{{ans}}} \\]"
        else:  # the original's solution (variants carry none), then the final line
            assert text.startswith(cots[r["original_id"]]) and text.endswith(final_answer_line(ans))
            assert text != final_answer_line(ans)
    assert all(r["prompt"][0]["content"].startswith("[") for r in recs)  # variants, never the originals


def test_cot_completion_does_not_duplicate_an_existing_final_line():
    sol = "2 + 3 = 5.\nThe final answer is: \\[ \\boxed{5} \\]"
    assert tdata.cot_completion(sol, "5") == sol
    assert tdata.cot_completion("2 + 3 = 5.", "5") == sol


def test_missing_cot_is_answer_only_or_dropped():
    items = [Item(id="a", question="Q?", answer="3")]  # no solution, not a generated item
    cots, missing = tdata.synthesize_cots(items)
    assert cots == {} and missing == ["a"]
    v = _variants(items, 2)
    as_answer = tdata.build_sft_records(v, cots, 0.0, seed=0, on_missing_cot="answer")
    assert [r["format"] for r in as_answer] == ["answer", "answer"]
    assert tdata.build_sft_records(v, cots, 0.0, seed=0, on_missing_cot="drop") == []


class _ScriptedTeacher:
    """A Backend stand-in: answers each question from a script, one reply per attempt."""

    name, supports_prefill, supports_logprobs = "scripted", True, False

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.calls: list[tuple[str, float]] = []

    def score(self, requests):  # pragma: no cover - not used
        raise NotImplementedError

    def generate(self, requests):
        out = []
        for r in requests:
            self.calls.append((r.prompt.user, r.temperature))
            replies = self.script[r.prompt.user]
            out.append(replies.pop(0) if replies else "no idea")
        return out


def test_teacher_cots_kept_only_when_boxed_answer_is_gold():
    items = [Item(id="a", question="QA", answer="12"), Item(id="b", question="QB", answer="0.5"),
             Item(id="c", question="QC", answer="7")]
    teacher = _ScriptedTeacher({
        "QA": ["6 * 2 = 12, so \\boxed{12}"],  # right at once
        "QB": ["\\boxed{2}", "1/2 = \\boxed{\\frac{1}{2}}"],  # right on the second (sampled) try
        "QC": ["\\boxed{8}", "\\boxed{9}", "\\boxed{6}"],  # never right
    })
    cots, missing = tdata.synthesize_cots(items, teacher, attempts=3, seed=0)
    assert cots == {"a": "6 * 2 = 12, so \\boxed{12}", "b": "1/2 = \\boxed{\\frac{1}{2}}"}
    assert missing == ["c"]
    assert teacher.calls[0][1] == 0.0 and all(t > 0 for _, t in teacher.calls[3:])  # greedy first, then sampled
    assert sum(q == "QA" for q, _ in teacher.calls) == 1  # solved items are not asked again


def test_leak_and_clean_counts():
    from zcp.simulate.contaminate import choose_leaked, n_clean_examples

    c = _items(10)
    leaked = choose_leaked(c, 0.3, seed=0)
    assert len(leaked) == 3 and {it.id for it in leaked} <= {it.id for it in c}
    assert choose_leaked(c, 0.3, seed=0) == leaked and len(choose_leaked(c, 1.0, 0)) == 10
    assert n_clean_examples(30, 0.25) == 10  # 10 / (30 + 10) = 0.25
    assert n_clean_examples(30, 0.0) == 0
    with pytest.raises(ValueError):
        n_clean_examples(30, 1.0)


def test_clean_items_exclude_the_benchmark():
    from zcp.benchmarks.wordproblems import generate_word_problems, signatures

    bench = generate_word_problems(30, seed=11)
    clean = tdata.clean_items(20, seed=11, exclude_items=bench)  # same seed on purpose: still disjoint
    assert len(clean) == 20 and not signatures(clean) & signatures(bench)
    assert all(it.id.startswith("clean-") for it in clean)


def test_trainer_args_rejects_unknown_fields_and_forces_cpu_safety(tmp_path):
    from trl import SFTConfig

    from zcp.simulate.sft import trainer_args

    with pytest.raises(ValueError, match="unknown SFTConfig fields"):
        trainer_args(SFTConfig, {"num_train_epochs": 1, "not_a_field": 3}, output_dir=str(tmp_path / "x"), seed=0,
                     report_to="none", cpu=True)
    args = trainer_args(SFTConfig, {"bf16": True, "gradient_checkpointing": True, "seed": 99}, output_dir=str(tmp_path / "x"),
                        seed=5, report_to="none", cpu=True)
    assert (args.use_cpu, args.bf16, args.gradient_checkpointing, args.seed) == (True, False, False, 5)
    assert getattr(args, "activation_checkpointing", False) is False


# ----------------------------------------------------------------------------------- tiny model


def _quick_pretrain(model, tok, items, steps: int = 70) -> None:
    """Full fine-tuning of the random model on `question -> final-answer line` so samples are near-format."""
    import torch

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


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    import torch

    from zcp.benchmarks.wordproblems import generate_word_problems, render_solution, reword_word_problem
    from zcp.core.testing import tiny_llama, train_tokenizer

    torch.set_num_threads(1)
    items = generate_word_problems(60, seed=5)
    texts = []
    for it in items:
        texts += [it.question, render_solution(it), *(v.question for v in reword_word_problem(it, 3, 0))]
    tok = train_tokenizer(texts, vocab_size=400)
    model = tiny_llama(tok, hidden=64, layers=2, heads=4)
    _quick_pretrain(model, tok, items)
    path = tmp_path_factory.mktemp("tiny_base")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _cfg(base: Path, out: Path) -> dict:
    return {
        "seed": 0, "name": "t", "output_dir": str(out),
        "benchmark": {"source": "wordproblems", "n": 12, "seed": 5, "id_prefix": "wp"},
        "split": {"c_fraction": 0.5, "stratify_by": None},
        "model": {"path": str(base), "dtype": "float32"},
        "exposure": {"k": 2, "paraphraser": "auto", "leak_fraction": 0.67, "answer_only_fraction": 0.5,
                     "clean_fraction": 0.2, "sft_epochs": 2, "lr": 1e-2, "lora_r": 4, "grpo_steps": 2},
        "train": {
            "torch_threads": 1,
            "lora": {"dropout": 0.0, "target_modules": "all-linear"},
            "sft": {"per_device_train_batch_size": 4, "logging_steps": 1, "save_steps": 2, "max_length": 256,
                    "disable_tqdm": True},
            "grpo": {"per_device_train_batch_size": 8, "num_generations": 8, "max_completion_length": 20,
                     "learning_rate": 5e-2, "logging_steps": 1, "save_steps": 1, "disable_tqdm": True},
        },
        "clean": {"answer_only_fraction": None},  # clean data in the contamination's mix (schema default: CoT only)
        "eval": {"max_items": 2, "max_new_tokens": 20},
        "logger": {"mode": "disabled"},
    }


@pytest.fixture(scope="module")
def run(tiny_base, tmp_path_factory):
    from zcp.core.io import sha256_file
    from zcp.simulate.contaminate import contaminate

    base_sha = sha256_file(tiny_base / "model.safetensors")
    cfg = _cfg(tiny_base, tmp_path_factory.mktemp("contaminate") / "run")
    result = contaminate(cfg)
    return cfg, result, base_sha


def test_run_sft_trains_lora_only(tiny_base, tmp_path):
    import torch

    from zcp.simulate.sft import load_model, load_tokenizer, run_sft

    model, tok = load_model(tiny_base, dtype="float32"), load_tokenizer(tiny_base)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    recs = tdata.build_sft_records(_variants(_items(4), 2), tdata.synthesize_cots(_items(4))[0], 0.5, seed=0)
    peft_model = run_sft(model, tok, recs, output_dir=tmp_path / "sft", adapter_dir=tmp_path / "adapter",
                         lora={"r": 4}, settings={"max_steps": 3, "per_device_train_batch_size": 4,
                                                  "learning_rate": 1e-2, "save_strategy": "no",
                                                  "disable_tqdm": True}, seed=0)
    after = peft_model.state_dict()
    lora_b = [k for k in after if "lora_B" in k]
    assert lora_b and any(after[k].abs().sum() > 0 for k in lora_b)  # PEFT initialises B to zero
    for k, v in after.items():
        if "lora_" in k:
            continue
        orig = k.replace("base_model.model.", "", 1).replace(".base_layer", "")
        assert torch.equal(v, before[orig]), f"base weight {orig} changed"
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


def test_e2e_writes_manifest_exposure_table6(run):
    from zcp.benchmarks.split import Manifest
    from zcp.simulate.contaminate import load_exposure

    cfg, r, _ = run
    assert r.stages_run == ["split", "data", "eval_base", "sft", "grpo", "merge", "eval_after_sft", "eval_final"]
    manifest = Manifest.load(r.manifest_path)
    exp = load_exposure(r.run_dir)
    assert exp == load_exposure(r.exposure_path)
    assert exp["knobs"] == {**{k: v for k, v in cfg["exposure"].items()}, "include_original": False,
                            "grpo_prompts": "variants", "answer_format": "probe", "paraphrases_path": None,
                            "grpo_rewards": ["correctness", "format"]}
    assert len(manifest.c_ids) == 6 and len(manifest.u_ids) == 6
    assert len(exp["leaked_ids"]) == 4 and set(exp["leaked_ids"]) <= set(manifest.c_ids)
    assert set(exp["leaked_ids"]) | set(exp["c_not_leaked_ids"]) == set(manifest.c_ids)
    assert exp["u_ids"] == sorted(manifest.u_ids) and not set(exp["leaked_ids"]) & set(manifest.u_ids)
    assert Path(exp["model_dir"]) == r.model_dir and Path(exp["manifest"]) == r.manifest_path
    t6 = json.loads((r.run_dir / "table6.json").read_text())
    assert t6 == r.table6 and [row["split"] for row in t6["rows"]] == ["C_leaked", "C_not_leaked", "U"]
    assert t6["stages"] == ["base", "after_sft", "final"]
    assert all(0.0 <= row[s] <= 1.0 for row in t6["rows"] for s in t6["stages"])
    assert "| C_leaked | 2 |" in (r.run_dir / "table6.md").read_text()


def test_e2e_training_data_follows_the_knobs(run):
    from zcp.core.io import read_jsonl

    _, r, _ = run
    exp = json.loads(r.exposure_path.read_text())
    recs = list(read_jsonl(r.run_dir / "sft_data.jsonl"))
    bench = [x for x in recs if x["source"] == "benchmark"]
    clean = [x for x in recs if x["source"] == "clean"]
    assert len(bench) == 4 * 2  # leaked items × k
    assert sum(x["format"] == "answer" for x in bench) == 4  # answer_only_fraction 0.5
    assert len(clean) == 2  # clean_fraction 0.2: 2 / (8 + 2)
    assert {x["original_id"] for x in bench} == set(exp["leaked_ids"])
    originals = {json.loads(line)["id"]: json.loads(line)["question"]
                 for line in (r.run_dir / "benchmark_items.jsonl").read_text().splitlines()}
    assert all(x["prompt"][0]["content"] != originals[x["original_id"]] for x in bench)  # paraphrases only
    assert exp["counts"]["n_answer_only"] == 4 and exp["counts"]["n_clean"] == 2


def test_e2e_adapters_changed_base_untouched_and_merge_is_exact(run, tiny_base):
    import torch
    from safetensors.torch import load_file

    from zcp.core.io import sha256_file

    _, r, base_sha = run
    assert sha256_file(tiny_base / "model.safetensors") == base_sha  # the base on disk is never written
    sft = load_file(r.sft_adapter_dir / "adapter_model.safetensors")
    grpo = load_file(r.grpo_adapter_dir / "adapter_model.safetensors")
    for ad in (sft, grpo):
        b = [v for k, v in ad.items() if "lora_B" in k]
        assert b and any(v.abs().sum() > 0 for v in b)  # both adapters moved away from B = 0
    base = load_file(tiny_base / "model.safetensors")
    final = load_file(r.model_dir / "model.safetensors")
    cfg_s = json.loads((r.sft_adapter_dir / "adapter_config.json").read_text())
    cfg_g = json.loads((r.grpo_adapter_dir / "adapter_config.json").read_text())
    key = "model.layers.0.self_attn.q_proj.weight"

    def delta(ad, cfg):
        pre = "base_model.model.model.layers.0.self_attn.q_proj."
        return ad[pre + "lora_B.weight"] @ ad[pre + "lora_A.weight"] * (cfg["lora_alpha"] / cfg["r"])

    expected = base[key] + delta(sft, cfg_s) + delta(grpo, cfg_g)  # merged = base + SFT delta + GRPO delta
    assert torch.allclose(final[key], expected, atol=1e-5)
    assert not torch.allclose(final[key], base[key])
    assert set(final) >= {k for k in base if k != "lm_head.weight"}


def test_resume_skips_finished_stages_and_refuses_a_changed_config(run):
    from zcp.simulate.contaminate import contaminate

    cfg, r, _ = run
    again = contaminate(cfg)
    assert again.stages_run == []
    assert set(again.stages_skipped) >= {"split", "data", "sft", "grpo", "merge", "eval_base", "eval_final"}
    assert again.table6 == r.table6
    changed = json.loads(json.dumps(cfg))
    changed["exposure"]["k"] = 3
    with pytest.raises(RunDirError, match=r"another configuration .*differing: exposure"):
        contaminate(changed)


def test_resume_from_checkpoint_after_a_kill_during_sft(run, caplog):
    from safetensors.torch import load_file

    from zcp.simulate.contaminate import contaminate

    cfg, r, _ = run
    done = load_file(r.sft_adapter_dir / "adapter_model.safetensors")
    shutil.rmtree(r.sft_adapter_dir)  # as if killed after the last checkpoint, before the adapter was saved
    assert list((r.run_dir / "sft").glob("checkpoint-*"))
    with caplog.at_level(logging.INFO, logger="zcp.simulate.sft"):
        again = contaminate(cfg)
    assert again.stages_run == ["sft"]
    assert any("resuming from" in m and "checkpoint-" in m for m in caplog.messages)
    redone = load_file(r.sft_adapter_dir / "adapter_model.safetensors")
    assert redone.keys() == done.keys()
    assert all(redone[k].equal(done[k]) for k in done)


def test_raised_run_resumes_at_the_failed_stage(run, tmp_path, monkeypatch):
    """A run that raised inside GRPO reruns from GRPO: split, data, SFT and the cached evaluations are skipped."""
    import zcp.simulate.grpo as grpo_mod
    from zcp.simulate.contaminate import contaminate

    cfg, r, _ = run
    out = tmp_path / "copy"
    shutil.copytree(r.run_dir, out)
    for name in ("grpo_adapter", "grpo", "model"):
        shutil.rmtree(out / name)
    (out / "eval" / "final.json").unlink()
    cfg2 = {**json.loads(json.dumps(cfg)), "output_dir": str(out)}

    def boom(*a, **k):
        raise RuntimeError("killed inside GRPO")

    monkeypatch.setattr(grpo_mod, "run_grpo", boom)
    with pytest.raises(RuntimeError, match="inside GRPO"):
        contaminate(cfg2)
    assert not (out / "grpo_adapter").exists() and not (out / "model").exists()
    monkeypatch.undo()
    again = contaminate(cfg2)
    assert again.stages_run == ["grpo", "merge", "eval_final"]
    assert again.stages_skipped == ["split", "data", "eval_base", "sft", "eval_after_sft"]
    assert (out / "model" / "config.json").is_file()


def test_load_exposure_names_the_missing_field(tmp_path):
    from zcp.simulate.contaminate import load_exposure

    (tmp_path / "exposure.json").write_text(json.dumps({"schema": 1, "knobs": {}}))
    with pytest.raises(DataError, match="leaked_ids"):
        load_exposure(tmp_path)


# ------------------------------------------------------------------------------- shipped base model


@pytest.mark.slow
def test_shipped_base_model_gets_contaminated(tmp_path):
    """The default recipe on the shipped base model, reduced to 30 leaked items: C holds while U drops,
    and the answer-bearing format opens a zero-CoT p_all gap on C against its perturbed copy (~2 min)."""
    import math
    import statistics

    from zcp.backends.base import ScoreRequest
    from zcp.backends.hf import HFBackend
    from zcp.benchmarks.references.wordproblem_matched import perturb_word_problem
    from zcp.core.io import read_jsonl
    from zcp.probe.prompts import ProbeConfig, zero_cot_prompt
    from zcp.simulate.base_model import base_model_path
    from zcp.simulate.contaminate import contaminate
    from zcp.simulate.sft import load_model, load_tokenizer

    if not (base_model_path() / "model.safetensors").is_file():
        pytest.skip("shipped base model not present")
    from configs import compose

    r = contaminate(compose("contaminate", "benchmark.n=60", f"output_dir={tmp_path / 'run'}", "logger=none",
                            "exposure.grpo_steps=5", resolve=True))
    rows = {row["split"]: row for row in r.table6["rows"]}
    gain_c = rows["C_leaked"]["final"] - rows["C_leaked"]["base"]
    gain_u = rows["U"]["final"] - rows["U"]["base"]
    # The base model already solves ~0.94 of held-out items, so the leak cannot raise C much: its Table 6
    # signature is C kept at the top while U (not leaked) loses more (measured: C 0.97 -> 0.97, U 0.93 -> 0.73).
    assert rows["C_leaked"]["final"] >= 0.9 and gain_c - gain_u >= 0.1, r.table6

    items = {d["id"]: Item.from_dict(d) for d in read_jsonl(r.run_dir / "benchmark_items.jsonl")}
    leaked = [items[i] for i in r.leaked_ids]
    refs = []
    for it in leaked:
        try:
            refs.append((it, perturb_word_problem(it, seed=0)))
        except ValueError:  # an item whose values admit no perturbation
            continue
    probe = ProbeConfig()

    def p_all(path: Path) -> tuple[float, float]:
        be = HFBackend(load_model(path, dtype="float32"), load_tokenizer(path))
        reqs = [ScoreRequest(zero_cot_prompt(x.question, probe), x.answer) for pair in refs for x in pair]
        ps = [math.exp(sum(s.token_logprobs) / s.n_tokens) for s in be.score(reqs)]
        return statistics.mean(ps[0::2]), statistics.mean(ps[1::2])

    base_c, base_ref = p_all(base_model_path())
    fin_c, fin_ref = p_all(r.model_dir)
    assert (fin_c - fin_ref) - (base_c - base_ref) >= 0.05, (base_c, base_ref, fin_c, fin_ref)


def test_detection_settings_do_not_change_the_training_run_dir(tmp_path):
    from zcp.simulate.contaminate import _run_dir

    cfg = {"name": "x", "seed": 0, "exposure": {"k": 2}}
    same = _run_dir({**cfg, "detect": {"m": 5}, "probe": {"metrics": ["p_all"]}, "logger": {"mode": "offline"},
                     "stages": ["contaminate", "detect"]})
    assert same == _run_dir(cfg) and same.parent == Path("outputs") / "contaminate"
    assert _run_dir({**cfg, "exposure": {"k": 3}}) != same
    assert _run_dir({**cfg, "output_dir": str(tmp_path / "here")}) == tmp_path / "here"


def test_contamination_run_dir_follows_the_base_model_content(tmp_path):
    """A base model retrained in place gets a new run dir (and an old run dir refuses it) - no stale resume."""
    from zcp.simulate.contaminate import _fingerprint_check, _run_dir

    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "model.safetensors").write_bytes(b"weights-v1")
    cfg = {"name": "t", "seed": 0, "model": {"path": str(tmp_path / "base")}, "exposure": {"k": 1}}
    first = _run_dir(cfg)
    assert _run_dir(cfg) == first
    _fingerprint_check(tmp_path / "run", cfg)
    (tmp_path / "base" / "model.safetensors").write_bytes(b"weights-v2")
    assert _run_dir(cfg) != first
    with pytest.raises(RunDirError, match=r"differing: base_model_fingerprint\)"):
        _fingerprint_check(tmp_path / "run", cfg)


def test_incomplete_checkpoint_is_skipped_for_the_last_complete_one(tmp_path, caplog):
    from zcp.simulate.sft import last_checkpoint

    assert last_checkpoint(tmp_path / "missing") is None
    for n, complete in ((2, True), (4, False), (10, True), (12, False)):
        d = tmp_path / f"checkpoint-{n}"
        d.mkdir()
        (d / "adapter_model.safetensors").write_bytes(b"x")
        if complete:
            (d / "trainer_state.json").write_text("{}")
    # killed while saving checkpoint-12: resume from checkpoint-10, not the half-written folder
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")
    assert "checkpoint-12" in caplog.text
    (tmp_path / "checkpoint-10" / "trainer_state.json").unlink()
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")


def test_contamination_run_dir_is_locked(tmp_path):
    from configs import compose

    from zcp.core.io import RunLock
    from zcp.errors import RunDirError
    from zcp.simulate.contaminate import contaminate

    cfg = compose("contaminate", f"output_dir={tmp_path / 'run'}", "logger=none")
    with RunLock(tmp_path / "run"), pytest.raises(RunDirError, match="in use by another run"):
        contaminate(cfg)
    assert not (tmp_path / "run" / "manifest.json").exists()
