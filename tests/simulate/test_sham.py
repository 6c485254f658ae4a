"""The sham arm of the simulation: exposure.leak_fraction=0 fine-tunes with the recipe of a full leak
on non-benchmark items, the negative control whose detections are false positives.

Config errors are one line and come before any model loads; the sham data matches the leak arm's volume and
format mix and holds nothing of C or U; training_items.jsonl lists exactly the clean and sham items (and an
older run dir gets it without losing its training); the reports label the run "sham". One end-to-end sham run
on the shipped tiny model (~30 s).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from configs import compose

os.environ["WANDB_MODE"] = "disabled"

from zcp.benchmarks.wordproblems import signature
from zcp.config import asset_path
from zcp.core.io import read_jsonl, sha256_file, write_jsonl
from zcp.core.items import Item
from zcp.errors import ConfigError

# the reduced demo configuration of tests/integration/test_simulate.py
REDUCED = [
    "benchmark.n=16", "exposure.k=1", "exposure.sft_epochs=1", "exposure.grpo_steps=1", "eval.max_items=2",
    "eval.max_new_tokens=24", "train.grpo.max_completion_length=24", "train.grpo.per_device_train_batch_size=4",
    "train.grpo.num_generations=4", "detect.m=1", "detect.seeds=[0,1]", "stats.bootstrap_samples=500",
    "probe.full_cot_max_tokens=40", "logger=none",
    "train.sft.warmup_steps=0",  # its one SFT step must run at a learning rate above 0 (else the model is unchanged)
]


@pytest.fixture
def no_models(monkeypatch):
    """Every model loader the contamination pipeline reaches fails the test if called."""
    import transformers

    import zcp.backends.registry
    import zcp.config
    import zcp.simulate.contaminate as contaminate

    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded before the config error")

    monkeypatch.setattr(contaminate, "load_model", boom)
    monkeypatch.setattr(contaminate, "load_tokenizer", boom)
    monkeypatch.setattr(zcp.backends.registry, "build_backend", boom)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)


def _one_line(excinfo: pytest.ExceptionInfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------------------ config errors


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_leak_fraction_out_of_range_is_refused_at_compose_time(value):
    from zcp.config.schemas import validate

    with pytest.raises(ConfigError, match=r"exposure\.leak_fraction") as e:
        validate(compose("contaminate", f"exposure.leak_fraction={value}", resolve=True))
    assert "[0, 1]" in _one_line(e)
    checked = validate(compose("contaminate", "exposure.leak_fraction=0", resolve=True))
    assert checked["exposure"].leak_fraction == 0.0
    with pytest.raises(ConfigError, match=r"exposure\.sham_items"):
        validate(compose("contaminate", "exposure.leak_fraction=0", "exposure.sham_items=0", resolve=True))


def test_leak_fraction_rounding_to_no_item_fails_before_any_model_loads(no_models, tmp_path):
    from zcp.simulate.pipeline import run_simulation

    out = tmp_path / "run"
    cfg = compose("demo", "exposure.leak_fraction=0.003", "logger=none", f"output_dir={out}")
    with pytest.raises(ConfigError) as e:
        run_simulation(cfg)
    assert _one_line(e) == ("exposure.leak_fraction=0.003 leaks round(0.003 x 50) = 0 of 50 C items; "
                            "use exposure.leak_fraction=0 for a sham run")
    assert not out.exists()  # refused before the run dir (and any training data) was made


def test_rounding_is_checked_against_the_split_given(no_models, tmp_path):
    """|C| comes from the given C file, not from benchmark.n; the data stage checks again (teacher not built)."""
    from zcp.simulate.contaminate import check_inputs, choose_leaked

    rows = [{"id": f"q{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(6)]
    c_path, u_path = tmp_path / "c.jsonl", tmp_path / "u.jsonl"
    write_jsonl(c_path, rows[:4])
    write_jsonl(u_path, rows[4:])
    cfg = compose("contaminate", f"split.c_path={c_path}", f"split.u_path={u_path}",
                  "exposure.leak_fraction=0.1", resolve=True)
    with pytest.raises(ConfigError, match=r"round\(0\.1 x 4\) = 0 of 4 C items") as e:
        check_inputs(cfg)
    _one_line(e)
    check_inputs({**cfg, "exposure": {**cfg["exposure"], "leak_fraction": 0.25}})  # one item: accepted
    with pytest.raises(ConfigError, match="= 0 of 3 C items"):
        choose_leaked([Item(id=f"x{i}", question="q", answer="1") for i in range(3)], 0.1, seed=0)


def test_sham_on_a_file_benchmark_needs_enough_clean_file_rows(no_models, tmp_path):
    from zcp.simulate.contaminate import contaminate

    bench = [{"id": f"b{i}", "question": f"What is {i} times 3?", "answer": str(3 * i)} for i in range(8)]
    bench_path = tmp_path / "bench.jsonl"
    write_jsonl(bench_path, bench)
    base = ["benchmark.source=file", f"benchmark.path={bench_path}", "exposure.leak_fraction=0", "exposure.k=1",
            "exposure.clean_fraction=0.5", f"output_dir={tmp_path / 'run'}", "logger=none"]
    with pytest.raises(ConfigError, match=r"clean\.source=file and clean\.path") as e:
        contaminate(compose("contaminate", *base, resolve=True))
    _one_line(e)
    clean_path = tmp_path / "clean.jsonl"
    extra = [{"id": f"c{i}", "question": f"What is {i} minus 1?", "answer": str(i - 1)} for i in range(10)]
    write_jsonl(clean_path, [*extra, bench[0]])  # a benchmark row in the clean file never counts
    # 4 sham items (|C|) need 4 clean rows (clean_fraction 0.5 of 4 examples) + 4 sham rows: 10 are enough
    from zcp.simulate.contaminate import check_inputs

    check_inputs(compose("contaminate", *base, "clean.source=file", f"clean.path={clean_path}", resolve=True))
    with pytest.raises(ConfigError, match=r"clean.path=.*: 3 row\(s\) are neither benchmark .* needs 7") as e:
        contaminate(compose("contaminate", *base, "clean.source=file", f"clean.path={clean_path}",
                            "exposure.sham_items=7", resolve=True))
    _one_line(e)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------ the sham data


def _build(tmp_path: Path, name: str, *overrides: str) -> tuple[dict, Path, list[Item], dict]:
    from zcp.simulate.contaminate import _manifest, build_training_data, load_benchmark

    cfg = compose("contaminate", "benchmark.n=40", "exposure.k=3", "exposure.answer_only_fraction=0.5",
                  "exposure.clean_fraction=0.4", *overrides, resolve=True)
    d = tmp_path / name
    d.mkdir()
    items = load_benchmark(cfg)
    counts = build_training_data(cfg, items, _manifest(cfg, items, d, 0), d, seed=0)
    return cfg, d, items, counts


def _format_mix(d: Path) -> dict:
    recs = list(read_jsonl(d / "sft_data.jsonl"))
    return {"total": len(recs), "leak_like": sorted((r["format"], r.get("answer_format", "probe")) for r in recs
                                                    if r["source"] != "clean"),
            "clean": sorted((r["original_id"], r["format"]) for r in recs if r["source"] == "clean")}


@pytest.mark.parametrize("grpo_prompts", ["variants", "originals"])
def test_sham_data_has_the_leak_arms_volume_and_format_mix(tmp_path, grpo_prompts):
    _, leak_dir, _, leak = _build(tmp_path, "leak", "exposure.leak_fraction=1", f"exposure.grpo_prompts={grpo_prompts}")
    _, sham_dir, _, sham = _build(tmp_path, "sham", "exposure.leak_fraction=0", f"exposure.grpo_prompts={grpo_prompts}")
    assert (leak["arm"], sham["arm"]) == ("leak", "sham")
    assert (sham["n_leaked"], sham["n_sham"], leak["n_leaked"], leak["n_sham"]) == (0, 20, 20, 0)
    for key in ("n_sft_examples", "n_variants", "n_answer_only", "n_cot", "n_clean", "n_grpo_prompts"):
        assert sham[key] == leak[key], key
    assert sham["n_answer_only"] == 30 and sham["n_cot"] == 30 and sham["n_clean"] == 40
    # the same examples per format, and the very same clean items
    assert _format_mix(sham_dir) == _format_mix(leak_dir)
    sham_recs = list(read_jsonl(sham_dir / "sft_data.jsonl"))
    assert {r["source"] for r in sham_recs} == {"sham", "clean"}
    grpo = list(read_jsonl(sham_dir / "grpo_data.jsonl"))
    sham_items = {it["id"]: it for it in read_jsonl(sham_dir / "training_items.jsonl") if it["role"] == "sham"}
    questions = {it["question"] for it in sham_items.values()}
    assert all((g["prompt"][0]["content"] in questions) == (grpo_prompts == "originals") for g in grpo)


def test_sham_data_holds_no_benchmark_question_or_signature(tmp_path):
    _, d, items, _ = _build(tmp_path, "sham", "exposure.leak_fraction=0", "exposure.answer_format=mix")
    norm = lambda t: " ".join(t.split())  # noqa: E731
    bench_q = {norm(it.question) for it in items}
    bench_sig = {signature(it) for it in items}
    texts = [m["content"] for r in read_jsonl(d / "sft_data.jsonl") for m in (*r["prompt"], *r["completion"])]
    texts += [r["prompt"][0]["content"] for r in read_jsonl(d / "grpo_data.jsonl")]
    assert texts and not any(norm(t) in bench_q for t in texts)
    assert not any(q in t for t in texts for q in bench_q)  # nor inside a completion or prompt
    trained = [Item.from_dict(r) for r in read_jsonl(d / "variants.jsonl")]
    trained += [Item.from_dict(r) for r in read_jsonl(d / "training_items.jsonl")]
    assert trained and not {signature(it) for it in trained} & bench_sig
    sham = [it for it in trained if it.id.startswith("sham-")]
    clean = [it for it in trained if it.id.startswith("clean-")]
    assert sham and clean and not {signature(it) for it in sham} & {signature(it) for it in clean}
    # the sham items are word problems of the benchmark's own families
    assert {it.metadata["family"] for it in sham} == {it.metadata["family"] for it in items}


def test_training_items_lists_exactly_the_clean_and_sham_items(tmp_path):
    from zcp.simulate.contaminate import training_items

    for arm, lf in (("sham", 0), ("leak", 0.5)):
        _, d, _, counts = _build(tmp_path, arm, f"exposure.leak_fraction={lf}", "exposure.sham_items=7")
        recs = list(read_jsonl(d / "sft_data.jsonl"))
        rows = list(read_jsonl(d / "training_items.jsonl"))
        by_role = {role: {r["original_id"] for r in recs if r["source"] == role} for role in ("clean", "sham")}
        assert {role: {r["id"] for r in rows if r["role"] == role} for role in ("clean", "sham")} == by_role
        assert {it.id for it in training_items(d)} == by_role["clean"] | by_role["sham"]
        assert {it.id for it in training_items(d, "sham")} == by_role["sham"]
        assert len(by_role["sham"]) == (7 if arm == "sham" else 0) == counts["n_sham"]
        assert all(it.metadata.get("family") for it in training_items(d))  # rows keep their metadata
        # the loaders read the file as an items file (what reference building does)
        from zcp.benchmarks.loaders import load_items

        assert len(load_items(str(d / "training_items.jsonl"), format="items")) == len(rows)


def test_sham_items_from_a_clean_file_are_neither_benchmark_nor_clean_rows(tmp_path):
    from zcp.simulate.contaminate import _manifest, build_training_data, load_benchmark

    bench = [{"id": f"b{i}", "question": f"What is {i} times 3?", "answer": str(3 * i)} for i in range(8)]
    bench_path, clean_path = tmp_path / "bench.jsonl", tmp_path / "clean.jsonl"
    write_jsonl(bench_path, bench)
    write_jsonl(clean_path, [{"id": f"c{i}", "question": f"What is {i} minus 1?", "answer": str(i - 1),
                              "solution": f"{i} - 1 = {i - 1}."} for i in range(30)] + [bench[1]])
    cfg = compose("contaminate", "benchmark.source=file", f"benchmark.path={bench_path}",
                  "exposure.leak_fraction=0", "exposure.k=1", "exposure.clean_fraction=0.5",
                  "clean.source=file", f"clean.path={clean_path}", resolve=True)
    items = load_benchmark(cfg)
    d = tmp_path / "run"
    d.mkdir()
    counts = build_training_data(cfg, items, _manifest(cfg, items, d, 0), d, seed=0)
    rows = list(read_jsonl(d / "training_items.jsonl"))
    sham = {r["id"] for r in rows if r["role"] == "sham"}
    clean = {r["id"] for r in rows if r["role"] == "clean"}
    assert len(sham) == 4 and len(clean) == 4 and counts["n_sham"] == 4 and not sham & clean
    assert not (sham | clean) & {b["id"] for b in bench}
    texts = {r["prompt"][0]["content"] for r in read_jsonl(d / "sft_data.jsonl")}
    assert not texts & {b["question"] for b in bench}


# ------------------------------------------------------------------------------------------ run dirs


def test_the_run_dir_hash_tells_sham_from_leak():
    from zcp.simulate.contaminate import _run_dir

    leak = compose("contaminate", resolve=True)
    sham = compose("contaminate", "exposure.leak_fraction=0", resolve=True)
    assert _run_dir(sham) != _run_dir(leak)
    sham_10 = compose("contaminate", "exposure.leak_fraction=0", "exposure.sham_items=10", resolve=True)
    assert _run_dir(sham_10) != _run_dir(sham)
    # sham_items decides nothing in a leak run, and at its default the hash of configs without the key is kept
    assert _run_dir(compose("contaminate", "exposure.sham_items=10", resolve=True)) == _run_dir(leak)
    old = json.loads(json.dumps(leak))
    del old["exposure"]["sham_items"]
    assert _run_dir(old) == _run_dir(leak)


def test_an_older_run_dir_gets_training_items_and_keeps_its_training(tmp_path):
    """A run whose data stage predates training_items.jsonl: the data stage is not done; rerunning it writes the
    file (the clean items the run trained on) and leaves sft_data.jsonl and a finished SFT adapter alone."""
    from zcp.simulate.contaminate import _manifest, build_training_data, load_benchmark, pipeline_stages

    d = tmp_path / "run"
    cfg = compose("contaminate", "benchmark.n=20", "exposure.k=2", "exposure.clean_fraction=0.3",
                  f"output_dir={d}", resolve=True)
    d.mkdir()
    items = load_benchmark(cfg)
    build_training_data(cfg, items, _manifest(cfg, items, d, 0), d, seed=0)
    expected = (d / "training_items.jsonl").read_text()
    counts = json.loads((d / "data_counts.json").read_text())
    (d / "training_items.jsonl").unlink()  # as an older data stage left it
    old_counts = {k: v for k, v in counts.items() if k not in ("arm", "n_sham")}
    (d / "data_counts.json").write_text(json.dumps(old_counts))
    sft_sha = sha256_file(d / "sft_data.jsonl")
    adapter = d / "sft_adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"trained")
    (adapter / "adapter_config.json").write_text("{}")
    stages = {s.name: s for s in pipeline_stages(cfg, d)}
    assert not stages["data"].done() and stages["sft"].done()
    stages["data"].run()
    assert stages["data"].done() and stages["sft"].done()
    assert (d / "training_items.jsonl").read_text() == expected
    assert sha256_file(d / "sft_data.jsonl") == sft_sha and (adapter / "adapter_model.safetensors").read_bytes() == b"trained"
    assert json.loads((d / "data_counts.json").read_text()) == {**old_counts, "arm": "leak", "n_sham": 0}


# ------------------------------------------------------------------------------------------ reports


def test_exposure_report_labels_a_sham_run(tmp_path):
    from zcp.validate.exposure import collect, table

    for name, arm, lf in (("exposure__leak", "leak", 1.0), ("exposure__sham", "sham", 0.0)):
        d = tmp_path / name
        (d / "detect").mkdir(parents=True)
        knobs = {"k": 2, "sft_epochs": 1.0, "answer_only_fraction": 0.5, "grpo_steps": 0, "leak_fraction": lf}
        (d / "exposure.json").write_text(json.dumps({"arm": arm, "knobs": knobs}))
        c_split = "C" if arm == "sham" else "C_leaked"
        res = [{"variant": "original", "split": s, "metric": "p_all", "c_cont": 0.5, "s": 0.2, "s_ref": 0.2}
               for s in ("C", "U")]
        rows6 = [{"split": c_split, "base": 0.25, "final": 0.75}, {"split": "U", "base": 0.5, "final": 0.5}]
        (d / "detect" / "simulation_summary.json").write_text(json.dumps(
            {"arm": arm, "results": {"FT": res}, "did": [], "table6": {"rows": rows6}}))
        (d / "run_config.json").write_text(json.dumps({"config": {"stages": ["contaminate", "detect"]}}))
    rows = {r["run"]: r for r in collect(tmp_path)}
    assert rows["exposure__sham"]["arm"] == "sham" and rows["exposure__leak"]["arm"] == "leak"
    md = table(list(rows.values()))
    sham_line = next(line for line in md.splitlines() if line.startswith("| sham, CoT + answer"))
    assert "0.25→0.75" in sham_line  # its C accuracy comes from the C split
    assert any(line.startswith("| CoT + answer") for line in md.splitlines())
    # an exposure.json from before the arm key: leak_fraction 0 still reads as a sham
    from zcp.validate.exposure import run_arm

    assert run_arm({"knobs": {"leak_fraction": 0.0}}) == "sham" and run_arm({"knobs": {"leak_fraction": 1}}) == "leak"


def test_study_report_puts_a_sham_run_in_its_own_table(tmp_path):
    from study_runs import _baselines_dir, _run_dir

    from zcp.core.io import write_json
    from zcp.validate.study import build_report

    root = tmp_path / "contaminate"
    knobs = {"k": 2, "sft_epochs": 2.0, "answer_only_fraction": 0.75, "answer_format": "probe", "clean_fraction": 0.5,
             "grpo_steps": 1, "lora_r": 4, "lr": 0.005}
    for name, lf in (("leak", 1.0), ("sham", 0.0)):
        run = _run_dir(root, f"detexp__{name}")
        write_json(run / "exposure.json", {"arm": name, "knobs": {**knobs, "leak_fraction": lf}})
        write_json(run / "run_config.json", {"config": {"stages": ["contaminate", "detect", "baselines"]}})
        write_json(run / "detect" / "simulation_summary.json", {})  # the detection stage finished
        _baselines_dir(run)
    rep = build_report({}, tmp_path / "out", ["acc", "p_all"],
                       exposure_dirs=[root / "detexp__leak", root / "detexp__sham"])
    assert [(e["kind"], e["level"]) for e in rep["exposure"]["runs"]] == [("paraphrased", 4), ("sham", 4)]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "### Sham fine-tune" in md and "### Paraphrased leak" in md
    assert md.index("### Paraphrased leak") < md.index("### Sham fine-tune")


# ------------------------------------------------------------------------------------------ end to end


@pytest.mark.slow  # ~11 s: a tiny sham training; make test-all (the sham logic stays in the unit tests above)
def test_a_sham_run_trains_and_reports_arm_sham(tmp_path):
    """The reduced demo with leak_fraction=0 (detection on the FT model only): it trains on the sham items,
    says arm sham in the result, exposure.json and simulation summary, and C stays one split."""
    from zcp.simulate.pipeline import run_simulation

    if not Path(asset_path("base_model"), "model.safetensors").exists():
        pytest.skip("the shipped base model is not built")
    out = tmp_path / "run"
    cfg = compose("demo", *REDUCED, "exposure.leak_fraction=0", "detect.base_model=false",
                  f"output_dir={out}")
    res = run_simulation(cfg)
    r = res["contamination"]
    assert r.arm == "sham" and r.leaked_ids == [] and "sft" in r.stages_run and "grpo" in r.stages_run
    exp = json.loads((out / "exposure.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert exp["arm"] == "sham" and exp["knobs"]["sham_items"] == len(manifest["c_ids"]) == len(exp["sham_ids"])
    assert exp["leaked_ids"] == [] and sorted(exp["c_not_leaked_ids"]) == sorted(manifest["c_ids"])
    recs = list(read_jsonl(out / "sft_data.jsonl"))
    assert {x["source"] for x in recs} == {"sham", "clean"}
    assert {x["original_id"] for x in recs if x["source"] == "sham"} == set(exp["sham_ids"])
    assert [row["split"] for row in r.table6["rows"]] == ["C", "U"]
    summ = res["detection"]
    assert summ["arm"] == "sham" and {x["split"] for x in summ["results"]["FT"]} == {"C", "U"}
    assert json.loads((out / "detect" / "simulation_summary.json").read_text())["arm"] == "sham"
