"""The simulation's stages: what a stage needs is checked before training, in one line, and finished
training is never discarded because a later stage's setting changed.

One test (or a small group) per case of the issue:
1. given C/U files with `stages=[contaminate,detect]`: the reference builder is resolved on the ACTUAL items;
2. the probe group composed in run_contaminate's config, the context check before training with the tokenizer
   only, advice naming the simulation's own keys (detect.on_overflow), a fingerprint of training inputs only;
3. one's own benchmark file: a full-benchmark reference set, detect.missing_reference, detect.on_overflow;
4. a learning-rate schedule that leaves no effective step is refused (a warning when it never leaves warmup);
5. two simulations in sibling dirs share the base model's detection (the second waits, then resumes);
6. one-line errors before any model loads: a model dir without weights, a different config in a run dir,
   ENOSPC (also a checkpoint writer's bare "unexpected pos"), a read-only output dir, too little free space.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

os.environ["WANDB_MODE"] = "disabled"

from configs import compose

from zcp import REPO_ROOT
from zcp.config import asset_path, one_line_errors
from zcp.errors import ConfigError, DataError, RunDirError

GSM8K = REPO_ROOT / "tests" / "fixtures" / "gsm8k" / "test_head12.jsonl"
RELEASE = REPO_ROOT / "tests" / "fixtures" / "zcp-release" / "omnimath_dataset_c_rows1-6_2154.jsonl"
# the reduced demo configuration of tests/integration/test_simulate.py (warmup 0: its one SFT step must move the weights)
REDUCED = [
    "benchmark.n=16", "exposure.k=1", "exposure.sft_epochs=1", "exposure.grpo_steps=1", "eval.max_items=2",
    "eval.max_new_tokens=24", "train.grpo.max_completion_length=24", "train.grpo.per_device_train_batch_size=4",
    "train.grpo.num_generations=4", "detect.m=1", "detect.seeds=[0,1]", "stats.bootstrap_samples=500",
    "probe.full_cot_max_tokens=40", "logger=none", "train.sft.warmup_steps=0",
]


def _shipped() -> None:
    if not Path(asset_path("base_model"), "model.safetensors").exists():
        pytest.skip("the shipped base model is not built")


@pytest.fixture
def no_models(monkeypatch):
    """Every model loader the simulation reaches fails the test if called (tokenizers may load: the context
    check before training counts tokens with the tokenizer only)."""
    import transformers

    import zcp.backends.registry
    import zcp.config
    import zcp.simulate.contaminate as contaminate
    import zcp.simulate.sft as sft

    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded before the error")

    for mod, name in ((contaminate, "load_model"), (sft, "load_model"), (zcp.backends.registry, "build_backend"),
                      (zcp.backends.registry, "build_backend")):
        monkeypatch.setattr(mod, name, boom)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)


def _one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg, msg
    return msg


def _empty(path: Path) -> bool:
    return not path.exists() or not any(path.iterdir())


def _split_files(tmp_path: Path, src: Path, n_c: int, n_u: int) -> tuple[Path, Path]:
    """C and U files of `src`'s first rows (each row given an id of its own: GSM8K rows number from 0 per file)."""
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    c, u = tmp_path / "dataset_c.jsonl", tmp_path / "dataset_u.jsonl"
    for path, part, tag in ((c, rows[:n_c], "c"), (u, rows[n_c:n_c + n_u], "u")):
        path.write_text("".join(json.dumps({"id": f"{tag}{k}", **r}) + "\n" for k, r in enumerate(part)))
    return c, u


# ------------------------------------------------------------------------------ 1: references on the actual items


def test_given_cu_files_without_a_builder_fail_before_training(tmp_path, no_models):
    """split.c_path/u_path (Omni-MATH rows) with stages=[contaminate,detect]: once a KeyError 'family' after
    training (benchmark.source's default said word problems); now one line, before anything loads or is written."""
    from zcp.simulate.pipeline import run_simulation

    _shipped()
    c, u = _split_files(tmp_path, RELEASE, 4, 2)
    out = tmp_path / "run"
    cfg = compose("demo", *REDUCED, "benchmark.format=zcp_release", f"split.c_path={c}", f"split.u_path={u}",
                  "stages=[contaminate,detect]", f"output_dir={out}")
    with pytest.raises(ConfigError, match=r"detect\.reference_path is required for the given C and U files") as e:
        run_simulation(cfg)
    _one_line(e.value)
    assert _empty(out)


def test_given_gsm8k_cu_files_get_the_gsm8k_builder(tmp_path):
    """GSM8K-format C/U files: the method resolves to gsm8k on the items and the references build (no
    reference_path); an explicit builder that cannot take them is refused naming it."""
    from zcp.benchmarks.split import Manifest
    from zcp.simulate.contaminate import load_benchmark
    from zcp.simulate.splits import check_reference_source, simulation_splits

    c, u = _split_files(tmp_path, GSM8K, 6, 6)
    cfg = compose("contaminate", "benchmark.format=gsm8k", f"split.c_path={c}", f"split.u_path={u}",
                  "detect.m=1", "detect.seeds=[0]", resolve=True)
    assert check_reference_source(cfg) == "gsm8k"
    items = load_benchmark(cfg)
    manifest = Manifest(c_ids=[f"c{k}" for k in range(6)], u_ids=[f"u{k}" for k in range(6)], seed=0)
    report: dict = {}
    groups, refs, _ = simulation_splits(cfg, items, manifest, report=report)
    assert report["method"] == "gsm8k" and refs and all(len(v) >= 1 for v in refs.values())
    assert {it.id for g in groups.values() for it in g} == set(refs)
    bad = compose("contaminate", "benchmark.format=gsm8k", f"split.c_path={c}", f"split.u_path={u}",
                  "detect.reference.method=wordproblem", resolve=True)
    with pytest.raises(ConfigError, match=r"the wordproblem builder cannot build references for the given C and U") as e:
        check_reference_source(bad)
    _one_line(e.value)


# ------------------------------------------------------------------------------ 2: the probe, the context, the hash


def test_run_contaminate_composes_the_probe_and_its_context_check_passes_before_training(no_models):
    """run_contaminate's config composes the probe group with the profile's full-CoT budget (160 of the shipped
    model's 256 positions), so stages=[contaminate,detect] fits; checked with the tokenizer only."""
    _shipped()
    cfg = compose("contaminate", "stages=[contaminate,detect]", "benchmark.n=16", resolve=True)
    assert cfg["probe"]["full_cot_max_tokens"] == cfg["train"]["eval_max_new_tokens"] == 160
    assert cfg["probe"]["metrics"] == ["acc", "con", "p_first", "p_all"]
    from zcp.simulate.pipeline import check_detection_stage

    found = check_detection_stage(cfg)
    assert found["overflow"] == 0 and found["items"] == 16 and found["units"] > 16


def test_overflow_is_refused_before_training_naming_the_simulations_keys(tmp_path, no_models):
    from zcp.simulate.pipeline import run_simulation

    _shipped()
    out = tmp_path / "run"
    cfg = compose("demo", *REDUCED, "probe.full_cot_max_tokens=512", "stages=[contaminate,detect]",
                  f"output_dir={out}")
    with pytest.raises(DataError) as e:
        run_simulation(cfg)
    msg = _one_line(e.value)
    assert "probe.full_cot_max_tokens=512" in msg and "detect.on_overflow=skip" in msg and "data.on_overflow" not in msg
    assert _empty(out)
    # skip on a run where every prompt overflows leaves nothing to test: refused too, before training
    cfg = compose("demo", *REDUCED, "probe.full_cot_max_tokens=512", "detect.on_overflow=skip",
                  "stages=[contaminate,detect]", f"output_dir={out}")
    with pytest.raises(DataError, match=r"nothing left to test in C.*too long.*detect\.on_overflow") as e:
        run_simulation(cfg)
    _one_line(e.value)
    assert _empty(out)


def test_later_stages_settings_never_change_the_contamination_run(tmp_path):
    """The contamination fingerprint covers what it depends on only: the advice a detection stage gives
    (detect.on_overflow, probe budgets, even `+data.on_overflow=skip`) resumes the same run dir."""
    from zcp.simulate.contaminate import _config_fingerprint, _fingerprint_check, _run_dir

    _shipped()
    base = ["stages=[contaminate,detect]"]
    cfg = compose("contaminate", *base, resolve=True)
    fp = _config_fingerprint(cfg)
    for extra in (["+data.on_overflow=skip"], ["probe.full_cot_max_tokens=100"], ["detect.on_overflow=skip"],
                  ["detect.missing_reference=skip"], ["stats.bootstrap_samples=100"], ["run.chunk_size=8"],
                  ["stages=[contaminate,detect,baselines]"], ["baselines_overrides=['detectors=[ppl]']"],
                  ["detect.m=5"]):
        other = compose("contaminate", *base, *extra, resolve=True)
        assert _config_fingerprint(other) == fp, extra
        assert _run_dir(other) == _run_dir(cfg), extra
    _fingerprint_check(tmp_path, cfg, fp)
    _fingerprint_check(tmp_path, compose("contaminate", *base, "+data.on_overflow=skip",
                                         "probe.full_cot_max_tokens=100", resolve=True))
    # a training setting still refuses, in one line naming what differs
    with pytest.raises(RunDirError, match=r"holds a contaminate run of another configuration \(fingerprint "
                                          r"[0-9a-f]{16}; this contaminate run: [0-9a-f]{16}; differing: exposure\.k\)"
                       ) as e:
        _fingerprint_check(tmp_path, compose("contaminate", *base, "exposure.k=3", resolve=True))
    _one_line(e.value)


# ------------------------------------------------------------------------------ 3: one's own benchmark file


def _gsm8k_reference(tmp_path: Path, ids: list[str], skip: set[str]) -> Path:
    """One hand-made reference row per item (a changed number, the answer + 1), none for `skip`."""
    from zcp.benchmarks.loaders import load_items

    items = load_items(str(GSM8K), format="gsm8k")
    rows = [{"id": f"{it.id}::ref0", "original_id": it.id,
             "question": it.question.replace("How", "Then how", 1) + " Count one more.",
             "answer": str(int(float(it.answer.replace(",", ""))) + 1)}
            for it in items if it.id in ids and it.id not in skip]
    path = tmp_path / "reference.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _own_file_cfg(ref: Path, *extra: str) -> dict:
    return compose("demo", "benchmark.source=file", f"benchmark.path={GSM8K}", "benchmark.format=gsm8k",
                   "benchmark.limit=8", f"detect.reference_path={ref}", "detect.m=1", "detect.seeds=[0]",
                   *extra, resolve=True)


def test_own_file_with_a_full_benchmark_reference_and_missing_rows(tmp_path, no_models):
    """benchmark.limit=8 of the 12-row file, a reference set for all 12 but two: the rows of the 4 items outside
    the benchmark are left out and counted; the 2 items without a row fail in one line naming
    detect.missing_reference=skip (before training), and with skip are left out, counted."""
    from zcp.benchmarks.loaders import load_items
    from zcp.simulate.contaminate import load_benchmark
    from zcp.simulate.pipeline import run_simulation, simulation_splits

    all_ids = [it.id for it in load_items(str(GSM8K), format="gsm8k")]
    ref = _gsm8k_reference(tmp_path, all_ids, {all_ids[0], all_ids[3]})
    out = tmp_path / "run"
    with pytest.raises(DataError, match=r"2 of 8 benchmark item\(s\) have no reference row.*"
                                        r"detect\.missing_reference=skip") as e:
        run_simulation(compose("demo", *REDUCED, "benchmark.source=file", f"benchmark.path={GSM8K}",
                               "benchmark.format=gsm8k", "benchmark.limit=8", f"detect.reference_path={ref}",
                               "stages=[contaminate,detect]", f"output_dir={out}"))
    _one_line(e.value)
    assert _empty(out)
    cfg = _own_file_cfg(ref, "detect.missing_reference=skip")
    items = load_benchmark(cfg)
    report: dict = {}
    groups, _, missing = simulation_splits(cfg, items, _split(cfg, items), report=report)
    assert sorted(missing) == sorted([all_ids[0], all_ids[3]])
    assert report["rows_outside_benchmark"] == 4 and report["items_without_reference_row"] == 2
    assert sum(len(g) for g in groups.values()) == 6


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer Llama with its own BPE tokenizer (and chat template), trained on nothing: saved to a folder."""
    from zcp.benchmarks.loaders import load_items
    from zcp.core.testing import tiny_llama, train_tokenizer

    items = load_items(str(GSM8K), format="gsm8k")
    tok = train_tokenizer([t for it in items for t in (it.question, it.solution or "", it.answer)], vocab_size=300)
    path = tmp_path_factory.mktemp("tiny_model")
    tiny_llama(tok, hidden=32, layers=2, heads=2, max_positions=512).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _split(cfg: dict, items: list) -> object:
    """The seeded C/U split the split stage makes of `items` (`zcp.benchmarks.split.split_items`)."""
    from zcp.benchmarks.split import split_items

    return split_items(items, seed=int(cfg["seed"]), c_fraction=float(cfg["split"]["c_fraction"]))


def _fake_result(run_dir: Path, model_dir: Path, cfg: dict) -> object:
    """A finished contamination run's result (its manifest; the 'fine-tuned' model is `model_dir`)."""
    from zcp.simulate.contaminate import ContaminationResult, load_benchmark

    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = _split(cfg, load_benchmark(cfg))
    manifest.save(run_dir / "manifest.json")
    return ContaminationResult(run_dir=run_dir, model_dir=model_dir, sft_adapter_dir=run_dir / "sft_adapter",
                               grpo_adapter_dir=None, manifest_path=run_dir / "manifest.json",
                               exposure_path=run_dir / "exposure.json", table6={"stages": [], "rows": []},
                               leaked_ids=list(manifest.c_ids))


def test_detection_stage_on_own_file_skips_what_does_not_fit(tmp_path, tiny_model):
    """The detection stage itself on one's own file: the full-benchmark reference set, missing rows skipped,
    prompts too long for the model's context (model.max_length) left out by detect.on_overflow=skip; the counts
    are in simulation_summary.json."""
    from zcp.backends.hf import HFBackend
    from zcp.benchmarks.loaders import load_items
    from zcp.probe.detect import probe_config
    from zcp.simulate.pipeline import run_detection_stage

    all_ids = [it.id for it in load_items(str(GSM8K), format="gsm8k")]
    ref = _gsm8k_reference(tmp_path, all_ids, {all_ids[1]})
    base = (f"model.path={tiny_model}", "probe.metrics=[p_first,p_all]", "detect.base_model=false",
            "stats.bootstrap_samples=200", "logger=none", "run.progress=false")
    # positions each item's probe needs (its original's and its reference row's, the larger): a context one short
    # of the largest leaves that item out and keeps the others
    from zcp.benchmarks.loaders import load_items as load_rows
    from zcp.probe.prompts import positions_needed

    probe = probe_config(compose("demo", *base, resolve=True)["probe"])
    counter = HFBackend.from_pretrained(str(tiny_model))
    originals = {it.id: it for it in load_items(str(GSM8K), format="gsm8k", limit=8)}
    rows = {it.metadata.get("original_id") or it.id.split("::")[0]: it for it in load_rows(str(ref), format="items")}
    need = {i: max(positions_needed(counter, [it, rows[i]], probe)) for i, it in originals.items() if i in rows}
    limit = sorted(need.values())[-1] - 1
    expected = sum(n <= limit for n in need.values())
    cfg = _own_file_cfg(ref, *base, "detect.missing_reference=skip", "detect.on_overflow=skip",
                        f"model.max_length={limit}")
    sim = run_detection_stage(cfg, _fake_result(tmp_path / "runs" / "a", tiny_model, cfg))
    assert sim["on_overflow"] == "skip" and sim["items_without_reference"] == [all_ids[1]]
    assert sum(sim["n_items_without_reference"].values()) == 1
    assert sim["reference"]["rows_outside_benchmark"] == 4
    summary = json.loads((tmp_path / "runs" / "a" / "detect" / "simulation_summary.json").read_text())
    assert summary["reference"]["method"] == "file" and summary["n_items_without_reference"] == \
        sim["n_items_without_reference"]
    ns = {r["split"]: r["n"] for r in sim["results"]["FT"] if r["metric"] == "p_all" and r["variant"] == "original"}
    assert sum(ns[s] for s in ("C", "U")) == expected and 1 <= expected < 7


# ------------------------------------------------------------------------------ 4: the learning-rate schedule


def test_sft_steps_within_warmup_are_refused_before_training(tmp_path, no_models):
    """6-item C, k=1, 1 epoch: one optimizer step at learning rate 0 under cpu_tiny's 10 warmup steps (the
    'contaminated' model was bit-identical to the base, exit 0). Now one line with the numbers and the fix."""
    from zcp.simulate.contaminate import contaminate

    _shipped()
    out = tmp_path / "run"
    cfg = compose("contaminate", "benchmark.n=12", "exposure.k=1", "exposure.sft_epochs=1", "logger=none",
                  f"output_dir={out}", resolve=True)
    with pytest.raises(ConfigError) as e:
        contaminate(cfg)
    msg = _one_line(e.value)
    for part in ("SFT: 1 optimizer step(s)", "12 examples", "batch 32", "warmup 10", "learning rate above 0",
                 "exposure.sft_epochs", "train.sft.warmup_steps"):
        assert part in msg, (part, msg)
    assert _empty(out)


def test_schedule_rule_counts_effective_steps_and_warns_within_warmup(caplog):
    """The rule (zcp.simulate.sft.check_schedule): no step at a rate above 0 is refused; a run that ends inside its
    warmup is a warning with the full-rate equivalent; a run past its warmup passes silently."""
    from trl import SFTConfig

    from zcp.simulate.sft import check_schedule, lr_schedule

    s = lr_schedule(SFTConfig, {"warmup_steps": 10, "learning_rate": 1e-3, "per_device_train_batch_size": 4,
                                "num_train_epochs": 1}, 20, stage="SFT")
    assert (s.steps, s.warmup, s.effective) == (5, 10, 4) and s.full_rate == pytest.approx(1.0)
    with caplog.at_level("WARNING", logger="zcp.simulate.sft"):
        check_schedule(s, "fix it")
    assert "never reaches its peak" in caplog.text and "1.00 full-rate" in caplog.text
    caplog.clear()
    ok = lr_schedule(SFTConfig, {"warmup_steps": 2, "learning_rate": 1e-3, "per_device_train_batch_size": 4,
                                 "num_train_epochs": 3}, 20, stage="SFT")
    check_schedule(ok, "fix it")
    assert ok.steps == 15 and ok.effective == 14 and caplog.text == ""
    one = lr_schedule(SFTConfig, {"warmup_steps": 0.5, "learning_rate": 1e-3, "per_device_train_batch_size": 32,
                                  "num_train_epochs": 1}, 6, stage="SFT")
    with pytest.raises(ConfigError, match=r"warmup 1 step"):
        check_schedule(one, "fix it")


# ------------------------------------------------------------------------------ 5: the shared base-model detection

_SECOND_SIMULATION = r"""
import json, logging, sys
from pathlib import Path
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from zcp.simulate.pipeline import run_detection_stage
from zcp.simulate.contaminate import ContaminationResult
cfg, res = json.loads(Path(sys.argv[1]).read_text()), json.loads(Path(sys.argv[2]).read_text())
res = ContaminationResult(**{k: (Path(v) if k.endswith(("_dir", "_path")) and v else v) for k, v in res.items()})
sim = run_detection_stage(cfg, res)
print("DONE", json.dumps(sim["results"]["base"], sort_keys=True))
"""


@pytest.mark.slow  # ~20 s: two tiny simulations; make test-all
def test_two_simulations_share_the_base_model_detection(tmp_path, tiny_model, monkeypatch):
    """Simulation A (this process) holds the shared base-detect dir while simulation B (a second process, in a
    sibling run dir) reaches it: B waits for A instead of refusing ("use another output_dir" could not help),
    then resumes A's finished records and reports the same base-model results."""
    import zcp.probe.detect
    from zcp.simulate.contaminate import result_dict
    from zcp.simulate.pipeline import run_detection_stage

    cfg = compose("demo", "benchmark.n=8", "detect.m=1", "detect.seeds=[0]", f"model.path={tiny_model}",
                  "probe.metrics=[p_first,p_all]", "stats.bootstrap_samples=100", "logger=none",
                  "run.progress=false", resolve=True)
    runs = tmp_path / "runs"
    res_a, res_b = (_fake_result(runs / n, tiny_model, cfg) for n in ("a", "b"))
    release, real = threading.Event(), zcp.probe.detect.probe_items

    def gated(*args, **kwargs):  # A holds the base-model detection until B is seen waiting
        if any(runs.glob("base-detect__*/.lock")):
            release.wait(timeout=600)
        return real(*args, **kwargs)

    monkeypatch.setattr(zcp.probe.detect, "probe_items", gated)
    out_a: dict = {}
    thread = threading.Thread(target=lambda: out_a.update(run_detection_stage(cfg, res_a)))
    thread.start()
    try:
        deadline = time.time() + 300
        while not any(runs.glob("base-detect__*/.lock")) and time.time() < deadline and thread.is_alive():
            time.sleep(0.2)
        assert any(runs.glob("base-detect__*/.lock")), "A never reached the base-model detection"
        (tmp_path / "cfg.json").write_text(json.dumps(cfg))
        (tmp_path / "res.json").write_text(json.dumps(result_dict(res_b)))
        env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO_ROOT)}
        b = subprocess.Popen([sys.executable, "-c", _SECOND_SIMULATION, str(tmp_path / "cfg.json"),
                              str(tmp_path / "res.json")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        waited = []

        def read_stderr() -> None:
            for line in b.stderr:
                waited.append(line)

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        deadline = time.time() + 300
        while b.poll() is None and time.time() < deadline and not any("waiting for it" in x for x in waited):
            time.sleep(0.2)
        assert any("waiting for it" in x for x in waited), "".join(waited)[-2000:]
    finally:
        release.set()
        thread.join(timeout=600)
    stdout, _ = b.communicate(timeout=600)
    reader.join(timeout=10)
    assert b.returncode == 0, "".join(waited)[-3000:]
    (done,) = [line for line in stdout.splitlines() if line.startswith("DONE ")]
    assert out_a and json.loads(done.split(" ", 1)[1]) == json.loads(json.dumps(out_a["results"]["base"], sort_keys=True))
    (shared,) = runs.glob("base-detect__*")
    units = json.loads((shared / "run_meta.json").read_text())["n_units"]
    assert len((shared / "records.jsonl").read_text().splitlines()) == units  # resumed: nothing probed twice


# ------------------------------------------------------------------------------ 6: one line before anything loads


def test_model_dir_without_weights_is_one_line_before_anything(tmp_path, no_models):
    from zcp.simulate.pipeline import run_simulation

    model = tmp_path / "model"
    model.mkdir()
    base = Path(asset_path("base_model"))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if (base / name).exists():
            (model / name).write_bytes((base / name).read_bytes())
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"model\.path=.*no safetensors weights") as e:
        run_simulation(compose("demo", *REDUCED, f"model.path={model}", f"output_dir={out}"))
    _one_line(e.value)
    assert _empty(out)


def _main(cfg: object) -> None:
    from zcp.simulate.pipeline import run_simulation

    one_line_errors(run_simulation)(cfg)


def test_a_different_config_in_a_run_dir_is_one_line(tmp_path, no_models, capsys, monkeypatch):
    from zcp.simulate.contaminate import _fingerprint_check

    _shipped()
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    out = tmp_path / "run"
    _fingerprint_check(out, compose("demo", *REDUCED, f"output_dir={out}", resolve=True))
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(SystemExit) as e:
        _main(compose("demo", *REDUCED, "exposure.k=2", f"output_dir={out}"))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another configuration" in err[0] and "differing: exposure.k)" in err[0]
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == before


def test_enospc_anywhere_is_one_line_naming_the_path(tmp_path, no_models, capsys, monkeypatch):
    """A full disk on the first write (a write into an open file names no path: zcp.core.io adds it)."""
    _shipped()
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        _main(compose("demo", *REDUCED, f"output_dir={out}"))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out / "run_fingerprint.json") in err[0] and "OSError 28 ENOSPC" in err[0], err


def test_checkpoint_write_failure_names_the_disk(tmp_path, capsys, monkeypatch):
    """torch's checkpoint writer on a full disk raises a bare RuntimeError ("unexpected pos ..."): the trainer
    step turns it into ENOSPC naming the trainer's output dir, printed as one line."""
    import shutil

    from zcp.simulate.sft import train_and_save

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    class FullDiskTrainer:
        def train(self, resume_from_checkpoint=None):
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 8847488 vs 8847376")

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1 << 20))
    out = tmp_path / "sft"
    with pytest.raises(OSError) as e:
        train_and_save(FullDiskTrainer(), out, tmp_path / "adapter", "SFT")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out) and "unexpected pos" in str(e.value)
    with pytest.raises(SystemExit) as ex:
        one_line_errors(lambda: train_and_save(FullDiskTrainer(), out, tmp_path / "adapter", "SFT"))()
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "OSError 28 ENOSPC" in err[0] and "1 MiB" in err[0]


def _read_only(monkeypatch, root: Path) -> None:
    """Make `root` behave as a read-only mount (EROFS on creating anything under it), even for root."""
    real_open, real_mkdir = os.open, os.mkdir

    def under(path) -> bool:
        return str(Path(path).absolute()).startswith(str(root))

    def ro_open(path, flags, *a, **k):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **k)

    def ro_mkdir(path, *a, **k):
        if under(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, *a, **k)

    monkeypatch.setattr(os, "open", ro_open)
    monkeypatch.setattr(os, "mkdir", ro_mkdir)


def test_read_only_output_dir_is_one_line_before_models_load(tmp_path, no_models, monkeypatch, tiny_model):
    from zcp.simulate.pipeline import run_detection_stage, run_simulation

    _shipped()
    ro = tmp_path / "ro"
    ro.mkdir()
    _read_only(monkeypatch, ro)
    with pytest.raises(RunDirError, match=r"is not writable: .*OSError 30 EROFS") as e:
        run_simulation(compose("demo", *REDUCED, f"output_dir={ro / 'run'}"))
    _one_line(e.value)
    assert _empty(ro)
    # a finished contamination run on a read-only disk: the detection stage refuses before a model loads
    monkeypatch.undo()
    cfg = compose("contaminate", "benchmark.source=file", f"benchmark.path={GSM8K}", "benchmark.format=gsm8k",
                  "benchmark.limit=4", "detect.m=1", "detect.seeds=[0]", f"model.path={tiny_model}",
                  "logger=none", resolve=True)
    result = _fake_result(ro / "run", tiny_model, cfg)
    import zcp.config

    monkeypatch.setattr(zcp.backends.registry, "build_backend", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    _read_only(monkeypatch, ro)
    with pytest.raises(RunDirError, match=r"detection stage's dir.*not writable.*EROFS"):
        run_detection_stage(cfg, result)


def test_too_little_free_space_is_one_line_before_models_load(tmp_path, no_models, monkeypatch):
    import shutil

    from zcp.simulate.pipeline import run_simulation

    _shipped()
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 5 << 20))
    out = tmp_path / "run"
    with pytest.raises(RunDirError, match=r"5 MiB free on .*needs at least \d+ MiB") as e:
        run_simulation(compose("demo", *REDUCED, f"output_dir={out}"))
    _one_line(e.value)
    assert _empty(out)
