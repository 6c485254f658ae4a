"""Detection runs on a fake backend: pairing, averaging of m draws, outputs, resume after a kill."""

import json

import pytest
from fakes import FakeBackend

from zcp.core.items import Item
from zcp.probe.detect import DetectDataset, DetectSettings, analyse, detect
from zcp.probe.prompts import ProbeConfig
from zcp.probe.stats import c_cont


def _dataset(n=30, m=3, memorise=True):
    items = [Item(f"i{k}", f"Q{k}: what is {k}+{k}?", str(2 * k)) for k in range(n)]
    ref = {it.id: [Item(f"{it.id}::ref{j}", f"Q{it.id}: what is {k + j + 1}+{k}?", str(2 * k + j + 1),
                        metadata={"original_id": it.id}) for j in range(m)] for k, it in enumerate(items)}
    para = {it.id: [Item(f"{it.id}::para0", it.question + " (reworded)", it.answer, metadata={"original_id": it.id})]
            for it in items}
    mem = {it.question: it.answer for it in items} if memorise else {}
    mem.update({p[0].question: p[0].answer for p in para.values()} if memorise else {})
    truth = {it.question: it.answer for it in items}
    return DetectDataset("D", items, ref, {"paraphrased": para}), mem, truth


def test_detect_outputs_and_verdict(tmp_path):
    ds, mem, truth = _dataset()
    fb = FakeBackend(mem, truth)
    s = detect(fb, [ds], ProbeConfig(), tmp_path, DetectSettings(seeds=[0, 1, 2], bootstrap_samples=2000, progress=False))
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 30 + 90 + 30
    needed = {"id", "split", "variant", "prompt_hash", "prediction", "correct", "consistent", "p_first", "p_all", "malformed"}
    assert needed <= set(recs[0])
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["results"] == s["results"]
    for r in s["results"]:
        assert {"variant", "metric", "n", "s", "s_ref", "p_value", "c_cont"} <= set(r)
        assert r["n"] == 30
    by = {(r["variant"], r["metric"]): r for r in s["results"]}
    assert by[("original", "acc")]["s"] == 1.0 and by[("original", "acc")]["s_ref"] == 0.0
    assert by[("original", "p_all")]["at_floor"] and by[("paraphrased", "p_all")]["at_floor"]
    # one test over all draws, the three seeds' Monte Carlo streams pooled: floor 1/(3 * 2000 + 1)
    assert by[("original", "p_all")]["p_value"] == pytest.approx(1 / 6001)
    assert by[("original", "p_all")]["c_cont"] > 0.99
    assert by[("original", "con")]["c_cont"] > 0.99  # zero-CoT (memorised) agrees with CoT, reference does not
    assert all(v["contaminated"] for v in s["verdicts"])
    table = (tmp_path / "table.md").read_text()
    assert "P_all S_ref" in table and "±" in table and "| D | paraphrased |" in table
    assert (tmp_path / "c_cont.png").stat().st_size > 1000


def test_clean_model_gives_half(tmp_path):
    ds, _, truth = _dataset(memorise=False)
    s = detect(FakeBackend({}, truth), [ds], ProbeConfig(), tmp_path, DetectSettings(bootstrap_samples=1000, progress=False))
    assert all(r["c_cont"] == 0.5 for r in s["results"])
    assert not any(v["contaminated"] for v in s["verdicts"])


def test_reference_draws_are_averaged_per_item():
    recs = []
    for k in range(4):
        recs.append({"split": "D", "variant": "original", "original_id": f"i{k}", "draw": 0, "correct": True})
        for j in range(3):  # two of three draws right
            recs.append({"split": "D", "variant": "reference", "original_id": f"i{k}", "draw": j, "correct": j < 2})
    out = analyse(recs, ["acc"], DetectSettings(seeds=[0]))
    r = out["results"][0]
    assert r["n"] == 4 and r["s"] == 1.0 and r["s_ref"] == pytest.approx(2 / 3)
    assert r["m"] == 3 and r["test"] == "exact_permutation"
    per = analyse(recs, ["acc"], DetectSettings(seeds=[0, 1, 2], reference_draws="per_seed"))["results"][0]
    assert [p["s_ref"] for p in per["per_seed"]] == [1.0, 1.0, 0.0]
    # the verdict is the one test over all draws, whatever the stability display shows
    assert per["p_value"] == r["p_value"] and per["c_cont"] == r["c_cont"]


def test_one_verdict_from_all_draws_seeds_only_vary_the_stream():
    rng = __import__("numpy").random.default_rng(0)
    recs = []
    for k in range(30):
        recs.append({"split": "D", "variant": "original", "original_id": f"i{k}", "draw": 0,
                     "p_all": float(rng.uniform(0.3, 0.7)), "correct": bool(rng.random() < 0.8)})
        for j in range(6):
            recs.append({"split": "D", "variant": "reference", "original_id": f"i{k}", "draw": j,
                         "p_all": float(rng.uniform(0.3, 0.7)), "correct": bool(rng.random() < 0.8)})
    out = analyse(recs, ["acc", "p_all"], DetectSettings(seeds=[0, 1, 2], bootstrap_samples=500))
    by = {r["metric"]: r for r in out["results"]}
    # exact binary test: every seed runs the identical test; the reported p is that test's p
    assert len({q["p_value"] for q in by["acc"]["per_seed"]}) == 1 and by["acc"]["c_cont_std"] == 0.0
    assert by["acc"]["p_value"] == by["acc"]["per_seed"][0]["p_value"]
    # Monte Carlo: the streams are pooled into one p; C_cont is C(p) of the reported p
    streams = by["p_all"]["per_seed"]
    assert by["p_all"]["p_value"] == pytest.approx((1 + sum(q["exceed"] for q in streams)) / 1501)
    for r in out["results"]:
        assert r["c_cont"] == c_cont(r["p_value"])
    (v,) = out["verdicts"]
    assert v["p_value"] == min(1.0, 2 * min(by["acc"]["p_value"], by["p_all"]["p_value"]))
    assert v["contaminated"] == (v["p_value"] < 0.05) and len(v["per_seed"]) == 3


def test_file_used_as_its_own_reference_gives_exactly_no_evidence(tmp_path):
    from zcp.backends.hf import HFBackend
    from zcp.core.testing import tiny_llama, train_tokenizer

    items = [Item(f"i{k}", f"Tom has {k + 3} apples and buys {2 * k + 1} more. How many apples?", str(3 * k + 4))
             for k in range(40)]
    tok = train_tokenizer([it.question + " " + it.answer for it in items] * 3, vocab_size=300)
    backend = HFBackend(tiny_llama(tok, seed=1), tok, max_batch_size=7)
    # every item is its own single reference draw, and a second copy gives m = 2
    ref = {it.id: [Item(f"{it.id}::r{j}", it.question, it.answer, metadata={"original_id": it.id}) for j in range(2)]
           for it in items}
    s = detect(backend, [DetectDataset("D", items, ref)], ProbeConfig(metrics=("acc", "p_first", "p_all")),
               tmp_path, DetectSettings(seeds=[0, 1], bootstrap_samples=500, chunk_size=13, progress=False))
    assert {r["metric"] for r in s["results"]} == {"acc", "p_first", "p_all"}
    for r in s["results"]:
        assert r["p_value"] == 1.0 and r["c_cont"] == 0.5 and r["diff"] == 0.0, r
    assert not s["verdicts"][0]["contaminated"] and s["verdicts"][0]["c_cont"] == 0.5


def test_resume_after_kill_loses_nothing_duplicates_nothing(tmp_path):
    ds, mem, truth = _dataset(n=40)
    settings = DetectSettings(seeds=[0], bootstrap_samples=1000, chunk_size=16, progress=False)
    with pytest.raises(KeyboardInterrupt):
        detect(FakeBackend(mem, truth, fail_after=7), [ds], ProbeConfig(), tmp_path / "run", settings)
    partial = (tmp_path / "run" / "records.jsonl").read_text().splitlines()
    assert 0 < len(partial) < 200
    # a writer killed mid-line leaves a torn last line: it must be repaired, not crash the resume
    with open(tmp_path / "run" / "records.jsonl", "a") as f:
        f.write('{"id": "torn')
    fb = FakeBackend(mem, truth)
    resumed = detect(fb, [ds], ProbeConfig(), tmp_path / "run", settings)
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    keys = [(r["split"], r["variant"], r["original_id"], r["draw"]) for r in recs]
    assert len(keys) == len(set(keys)) == 40 + 120 + 40
    fresh = detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path / "fresh", settings)
    assert resumed["results"] == fresh["results"] and resumed["verdicts"] == fresh["verdicts"]
    # nothing is re-probed on a third run
    fb3 = FakeBackend(mem, truth)
    detect(fb3, [ds], ProbeConfig(), tmp_path / "run", settings)
    assert fb3.calls == {"score": 0, "generate": 0}


def test_resume_refuses_other_configuration(tmp_path):
    ds, mem, truth = _dataset(n=5)
    settings = DetectSettings(bootstrap_samples=100, progress=False)
    detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)
    with pytest.raises(RuntimeError, match="records of another run"):
        detect(FakeBackend(mem, truth), [ds], ProbeConfig(metrics=("acc",)), tmp_path, settings)


def test_malformed_rates_reported(tmp_path):
    items = [Item("g", "GARBLE 1?", "1"), Item("h", "ok?", "2")]
    ref = {"g": [Item("g::r", "GARBLE 2?", "3", metadata={"original_id": "g"})], "h": [Item("h::r", "ok2?", "4", metadata={"original_id": "h"})]}
    s = detect(FakeBackend({}), [DetectDataset("D", items, ref)], ProbeConfig(metrics=("acc",)), tmp_path,
               DetectSettings(progress=False))
    mal = {m["variant"]: m for m in s["malformed"]}
    assert mal["original"]["zero_cot_malformed"] == 1 and mal["original"]["zero_cot_malformed_rate"] == 0.5


def test_settings_are_validated():
    for bad in ({"seeds": []}, {"bootstrap_samples": 0}, {"alpha": 2.0}, {"test": "sign"},
                {"reference_draws": "perseed"}, {"chunk_size": 0}):
        with pytest.raises(ValueError):
            DetectSettings(**bad)


def test_per_seed_draws_are_disjoint_shares():
    recs = [{"split": "D", "variant": "original", "original_id": "i", "draw": 0, "p_all": 0.5}]
    recs += [{"split": "D", "variant": "reference", "original_id": "i", "draw": j, "p_all": j / 10} for j in range(6)]
    out = analyse(recs, ["p_all"], DetectSettings(seeds=[0, 1, 2], reference_draws="per_seed", bootstrap_samples=10))
    assert [p["s_ref"] for p in out["results"][0]["per_seed"]] == pytest.approx([0.15, 0.25, 0.35])


def test_load_datasets_with_manifest_and_variants(tmp_path):
    from omegaconf import OmegaConf

    from zcp.benchmarks.loaders import save_items
    from zcp.benchmarks.split import split_items
    from zcp.probe.datasets import load_datasets

    ds, _, _ = _dataset(n=10, m=2)
    save_items(tmp_path / "items.jsonl", ds.originals)
    save_items(tmp_path / "ref.jsonl", [r for rows in ds.reference.values() for r in rows])
    save_items(tmp_path / "para.jsonl", [r for rows in ds.variants["paraphrased"].values() for r in rows][:6])
    manifest = split_items(ds.originals, seed=1)
    manifest.save(tmp_path / "manifest.json")
    cfg = OmegaConf.create({"name": "x", "path": str(tmp_path / "items.jsonl"), "format": "items",
                            "reference_path": str(tmp_path / "ref.jsonl"), "reference_format": "items",
                            "variant_paths": {"paraphrased": str(tmp_path / "para.jsonl")},
                            "manifest": str(tmp_path / "manifest.json")})
    out, skipped = load_datasets(cfg)
    assert [d.split for d in out] == ["C", "U"] and not skipped
    assert {it.id for it in out[0].originals} == set(manifest.c_ids)
    assert all(len(out[0].reference[it.id]) == 2 for it in out[0].originals)
    n_para = sum(len(v) for d in out for v in d.variants["paraphrased"].values())
    assert n_para == 6


def test_missing_reference_error_or_skip(tmp_path):
    from omegaconf import OmegaConf

    from zcp.benchmarks.loaders import save_items
    from zcp.errors import DataError
    from zcp.probe.datasets import load_datasets

    ds, _, _ = _dataset(n=4, m=1)
    save_items(tmp_path / "items.jsonl", ds.originals)
    save_items(tmp_path / "ref.jsonl", [r for k, rows in ds.reference.items() if k != "i2" for r in rows])
    cfg = {"name": "x", "path": str(tmp_path / "items.jsonl"), "reference_path": str(tmp_path / "ref.jsonl")}
    with pytest.raises(DataError, match="have no reference row: i2"):
        load_datasets(OmegaConf.create(cfg))
    out, skipped = load_datasets(OmegaConf.create({**cfg, "missing_reference": "skip"}))
    assert [it.id for it in out[0].originals] == ["i0", "i1", "i3"]
    assert skipped == [{"file": str(tmp_path / "ref.jsonl"), "id": "i2", "reason": "no reference row"}]


def test_resume_refuses_records_of_other_weights(tmp_path):
    """Same backend name, different weights (a model rewritten in place): the records are not reused."""
    ds, mem, truth = _dataset(n=5)
    settings = DetectSettings(bootstrap_samples=100, progress=False)
    old = FakeBackend(mem, truth)
    old.fingerprint = "weights-a"
    detect(old, [ds], ProbeConfig(), tmp_path, settings)
    new = FakeBackend(mem, truth)
    new.fingerprint = "weights-b"
    with pytest.raises(RuntimeError, match="records of another run"):
        detect(new, [ds], ProbeConfig(), tmp_path, settings)


def test_run_dir_is_locked_against_a_second_run(tmp_path):
    from zcp.core.io import RunLock
    from zcp.errors import RunDirError

    ds, mem, truth = _dataset(n=5)
    settings = DetectSettings(bootstrap_samples=100, progress=False)
    with RunLock(tmp_path), pytest.raises(RunDirError, match="in use by another run"):
        detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)
    assert not (tmp_path / "records.jsonl").exists()
    detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)  # the lock is gone with its holder


def test_refused_run_does_not_touch_the_directory(tmp_path):
    ds, mem, truth = _dataset(n=5)
    settings = DetectSettings(bootstrap_samples=100, progress=False)
    detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)
    called = []
    with pytest.raises(RuntimeError, match="records of another run"):
        detect(FakeBackend(mem, truth), [ds], ProbeConfig(metrics=("acc",)), tmp_path, settings,
               on_ready=lambda: called.append(1))
    assert not called  # run_detect writes config.yaml in on_ready: never for a refused run


def test_records_without_final_newline_and_duplicates_are_repaired(tmp_path):
    ds, mem, truth = _dataset(n=10)
    settings = DetectSettings(bootstrap_samples=100, chunk_size=8, progress=False)
    with pytest.raises(KeyboardInterrupt):
        detect(FakeBackend(mem, truth, fail_after=7), [ds], ProbeConfig(), tmp_path, settings)
    path = tmp_path / "records.jsonl"
    lines = path.read_text().splitlines()
    # a duplicated record (two writers) and a last record that lost its newline
    path.write_text("\n".join([*lines, lines[0]]))
    first = detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)
    again = detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    keys = [(r["split"], r["variant"], r["original_id"], r["draw"]) for r in recs]
    assert len(keys) == len(set(keys)) == 10 + 30 + 10
    assert first["results"] == again["results"]


def test_truncated_run_meta_names_the_file(tmp_path):
    from zcp.errors import RunDirError

    ds, mem, truth = _dataset(n=5)
    settings = DetectSettings(bootstrap_samples=100, progress=False)
    detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)
    meta = tmp_path / "run_meta.json"
    meta.write_text(meta.read_text()[:10])
    with pytest.raises(RunDirError, match=r"run_meta\.json is truncated"):
        detect(FakeBackend(mem, truth), [ds], ProbeConfig(), tmp_path, settings)


def _tiny_backend(items, max_positions):
    from zcp.backends.hf import HFBackend
    from zcp.core.testing import tiny_llama, train_tokenizer

    tok = train_tokenizer([it.question + " " + it.answer for it in items] * 3, vocab_size=300)
    return HFBackend(tiny_llama(tok, seed=2, max_positions=max_positions), tok)


def _long_and_short(n=6):
    items = [Item(f"i{k}", ("Tom has many apples in a big basket. " * (8 if k % 3 == 0 else 1))
                  + f"He has {k + 3} and buys {k + 1} more. How many?", str(2 * k + 4)) for k in range(n)]
    ref = {it.id: [Item(f"{it.id}::r0", it.question.replace("He has", "She has"), str(int(it.answer) + 1),
                        metadata={"original_id": it.id})] for it in items}
    return items, ref


def test_context_overflow_is_refused_by_default_before_probing(tmp_path):
    from zcp.errors import DataError

    items, ref = _long_and_short()
    backend = _tiny_backend(items, max_positions=64)
    with pytest.raises(DataError, match=r"4 of 12 probe prompts need more positions than the model's 64"):
        detect(backend, [DetectDataset("D", items, ref)], ProbeConfig(metrics=("p_first", "p_all")), tmp_path,
               DetectSettings(progress=False))
    assert not (tmp_path / "records.jsonl").exists()


def test_context_overflow_skip_and_truncate(tmp_path):
    items, ref = _long_and_short()
    backend = _tiny_backend(items, max_positions=64)
    probe = ProbeConfig(metrics=("p_first", "p_all"))
    s = detect(backend, [DetectDataset("D", items, ref)], probe, tmp_path / "skip",
               DetectSettings(progress=False, on_overflow="skip", bootstrap_samples=100))
    assert {o["original_id"] for o in s["overflow"]} == {"i0", "i3"}
    assert all(o["action"] == "skipped item" and o["positions_needed"] > 64 for o in s["overflow"])
    assert s["results"][0]["n"] == 4
    t = detect(backend, [DetectDataset("D", items, ref)], probe, tmp_path / "trunc",
               DetectSettings(progress=False, on_overflow="truncate", bootstrap_samples=100))
    assert t["results"][0]["n"] == 6 and len(t["overflow"]) == 4
    assert all(o["action"].startswith("truncated") for o in t["overflow"])
    recs = [json.loads(x) for x in (tmp_path / "trunc" / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 12


def test_repeated_reference_draws_count_once():
    # item i0's three reference rows are one perturbation repeated: one version, not three
    recs = [{"split": "D", "variant": "original", "original_id": "i0", "draw": 0, "p_all": 0.9, "prompt_hash": "o", "gold": "5"}]
    recs += [{"split": "D", "variant": "reference", "original_id": "i0", "draw": j, "p_all": 0.1, "prompt_hash": "r",
              "gold": "6"} for j in range(3)]
    r = analyse(recs, ["p_all"], DetectSettings(bootstrap_samples=100))["results"][0]
    assert r["m"] == 1 and r["p_value"] == 0.5  # one item, one distinct draw: p = 1/2, not 1/4
