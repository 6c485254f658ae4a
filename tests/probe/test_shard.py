"""Sharded detection (zcp.probe.shard): `run.shard=i/n` then `run.shard=merge` gives the records.jsonl,
run_meta.json, config.yaml and summary.json of one process (records byte for byte), on a tiny model built here;
a missing, unfinished, stale or still-running shard is refused in one line naming it; a bad `run.shard` is refused
at compose; a shard killed with SIGKILL resumes.

The 200-item run is in the fast suite, the 2,000-item one is marked slow. Shards run in
this process one after the other (each is the run_detect a subprocess would run, minus Python's start-up), except
in the SIGKILL test, which kills a shard subprocess.

Measured on the 2-core shared development box (wall clock, loaded; `pytest -s` prints them): 200 items (600
units): one process 10.9 s (first run, warm-up included), shards 3.6 s + 3.8 s, merge 2.6 s, the test 21 s;
2,000 items (6,000 units): one process 40.4 s, shards 22.8 s + 18.1 s, merge 4.9 s, the test 87 s (slow). The
fast tests of this file: 132 s wall, 39 s CPU, the SIGKILL test 62 s of it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from configs import compose

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.errors import ConfigError, RunDirError

REPO = Path(__file__).resolve().parents[2]
NAMES = ["Ann", "Bob", "Cara", "Dan", "Eve", "Finn", "Gus", "Hana"]
OBJECTS = ["pens", "apples", "cards", "books", "shells", "coins"]
TIMES: dict[str, float] = {}  # printed by the tests (pytest -s): the figures the report quotes


def _q(a: int, b: int, name: str, obj: str) -> str:
    return f"{name} has {a} {obj} and gets {b} more. How many {obj} does {name} have now?"


def _bench(root: Path, n: int, m: int = 2) -> dict[str, str]:
    """n items with m perturbed reference rows each (same template, other numbers, another sum), as files."""
    rng = random.Random(n)
    seen: set[str] = set()
    items, refs = [], []
    while len(items) < n:
        a, b, name, obj = rng.randint(10, 999), rng.randint(10, 999), rng.choice(NAMES), rng.choice(OBJECTS)
        if _q(a, b, name, obj) in seen:
            continue
        seen.add(_q(a, b, name, obj))
        iid = f"q{len(items):05d}"
        items.append(Item(iid, _q(a, b, name, obj), str(a + b)))
        for j in range(m):
            a2, b2 = rng.randint(10, 999), rng.randint(10, 999)
            refs.append(Item(f"{iid}::ref{j}", _q(a2, b2, name, obj), str(a2 + b2), metadata={"original_id": iid}))
    save_items(root / "bench.jsonl", items)
    save_items(root / "ref.jsonl", refs)
    return {"path": str(root / "bench.jsonl"), "reference_path": str(root / "ref.jsonl")}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_tok) -> Path:
    from zcp.core.testing import tiny_llama

    root = tmp_path_factory.mktemp("shard_model")
    model = tiny_llama(tiny_tok, hidden=32, layers=2, heads=2)
    model.save_pretrained(root)
    tiny_tok.save_pretrained(root)
    return root


def _overrides(model: Path, data: dict[str, str], out: Path, *extra: str) -> list[str]:
    return [f"model.path={model}", f"data.path={data['path']}", f"data.reference_path={data['reference_path']}",
            "data.format=items", "data.name=bench", f"output_dir={out}", "logger=none", "run.progress=false",
            "probe.metrics=[p_first,p_all]", "stats.bootstrap_samples=2000", "seeds=[0,1]", *extra]


def _run(model: Path, data: dict[str, str], out: Path, *extra: str) -> dict:
    from zcp.probe.run import run_detect

    return run_detect(compose("detect", *_overrides(model, data, out, *extra)))


def _timed(label: str, fn, *args) -> dict:
    t0 = time.perf_counter()
    res = fn(*args)
    TIMES[label] = round(time.perf_counter() - t0, 2)
    print(f"{label}: {TIMES[label]} s")
    return res


def _plain(summary: dict) -> dict:
    """summary.json without what belongs to one process's run: its output_dir and its measured cost plan."""
    return {k: v for k, v in summary.items() if k not in ("output_dir", "cost_plan")}


def _assert_same_run(one: Path, merged: Path) -> None:
    """records.jsonl and run_meta.json byte-identical; config.yaml identical but for output_dir; summary.json equal
    but for output_dir (so the same verdicts, p-values and C_cont to the last digit)."""
    assert (merged / "records.jsonl").read_bytes() == (one / "records.jsonl").read_bytes()
    assert (merged / "run_meta.json").read_bytes() == (one / "run_meta.json").read_bytes()
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (one, merged))
    assert _plain(s2) == _plain(s1)
    assert [v["p_value"] for v in s2["verdicts"]] == [v["p_value"] for v in s1["verdicts"]]
    c1, c2 = ((d / "config.yaml").read_text().replace(str(d), "OUT") for d in (one, merged))
    assert c2 == c1 and "shard: null" in c1
    t1, t2 = ((d / "table.md").read_text() for d in (one, merged))
    assert t2 == t1


def _sharded(model: Path, data: dict[str, str], out: Path, n: int) -> dict:
    for i in range(n):
        meta = _timed(f"shard {i}/{n}", _run, model, data, out, f"run.shard={i}/{n}")
        assert meta["shard"] == [i, n]
        assert not (out / "summary.json").exists()  # a shard tests nothing
    return _timed(f"merge of {n}", _run, model, data, out, "run.shard=merge")


@pytest.mark.parametrize("n_items", [200, pytest.param(2000, marks=pytest.mark.slow)])
def test_two_shards_merged_equal_one_process(model_dir, tmp_path, n_items):
    data = _bench(tmp_path, n_items)
    one = _timed(f"one process, {n_items} items", _run, model_dir, data, tmp_path / "one")
    merged = _sharded(model_dir, data, tmp_path / "sharded", 2)
    _assert_same_run(tmp_path / "one", tmp_path / "sharded")
    assert merged["verdicts"] == one["verdicts"] and merged["results"] == one["results"]
    n_units = 3 * n_items
    shard_units = [json.loads((tmp_path / "sharded" / "shards" / f"{i}-of-2" / "shard.json").read_text())["n_units"]
                   for i in range(2)]
    assert sum(shard_units) == n_units and abs(shard_units[0] - shard_units[1]) <= 3  # whole items, k mod 2
    print(json.dumps(TIMES))


def test_every_item_stays_in_one_shard_and_the_rule_is_k_mod_n():
    from zcp.probe.detect import DetectDataset
    from zcp.probe.shard import item_shards, plan_order, shard_units

    def ds(split: str, n: int) -> DetectDataset:
        its = [Item(f"{split}{k}", f"q{split}{k}", str(k)) for k in range(n)]
        ref = {it.id: [Item(f"{it.id}::r{j}", f"r{it.id}{j}", "1", metadata={"original_id": it.id}) for j in range(2)]
               for it in its}
        return DetectDataset(split, its, ref)

    datasets = [ds("C", 5), ds("U", 4)]
    units = [u for d in datasets for u in d.work()]
    owner = item_shards(datasets, 3)
    assert [owner[(s, f"{s}{k}")] for s, n in (("C", 5), ("U", 4)) for k in range(n)] == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    shards = [shard_units(units, datasets, i, 3) for i in range(3)]
    assert sorted(k for s in shards for k, _ in s) == sorted(k for k, _ in units)  # a partition of the units
    for s in shards:
        assert {owner[(k[0], k[2])] for k, _ in s} == {shards.index(s)}  # original and draws together
        pos = plan_order(datasets)
        assert [pos[k] for k, _ in s] == sorted(pos[k] for k, _ in s)  # each shard in plan order


@pytest.fixture(scope="module")
def small(model_dir, tmp_path_factory) -> dict[str, str]:
    return _bench(tmp_path_factory.mktemp("shard_small"), 24, m=1)


@pytest.fixture(scope="module")
def small_shards(model_dir, small, tmp_path_factory) -> Path:
    """Both shards of a 2-way run of the small benchmark, finished and not merged (each test copies them)."""
    out = tmp_path_factory.mktemp("shard_small_run") / "run"
    for i in range(2):
        _run(model_dir, small, out, f"run.shard={i}/2")
    return out


def _copy(src: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(src, tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))
    return tmp_path / "run"


def _message(exc: type[Exception], fn, *args) -> str:
    with pytest.raises(exc) as e:
        fn(*args)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def _merge_refused(model: Path, data: dict[str, str], out: Path) -> str:
    msg = _message(RunDirError, _run, model, data, out, "run.shard=merge")
    assert not (out / "summary.json").exists() and not (out / "records.jsonl").exists()
    return msg


def test_merge_refuses_a_missing_shard_and_none_at_all(model_dir, small, small_shards, tmp_path):
    msg = _merge_refused(model_dir, small, tmp_path / "empty")
    assert "holds no shard" in msg and "run.shard=i/n" in msg
    out = _copy(small_shards, tmp_path)
    import shutil

    shutil.rmtree(out / "shards" / "1-of-2")
    msg = _merge_refused(model_dir, small, out)
    assert "shard 1/2 is missing" in msg and "run the same command with run.shard=1/2" in msg


def test_a_shard_of_another_probe_is_refused_by_the_shard_and_named_stale_by_the_merge(model_dir, small,
                                                                                        small_shards, tmp_path):
    import shutil

    out = _copy(small_shards, tmp_path)
    other = "probe.zero_cot_max_tokens=16"  # another probe: other records
    msg = _message(RunDirError, _run, model_dir, small, out, "run.shard=1/2", other)
    assert f"{out / 'shards' / '1-of-2'} holds a detect-shard run of another configuration (fingerprint " in msg
    assert "differing: fingerprint, source); use another output_dir, or delete" in msg
    shutil.rmtree(out / "shards" / "1-of-2")
    _run(model_dir, small, out, "run.shard=1/2", other)
    msg = _merge_refused(model_dir, small, out)
    assert "shard 1/2" in msg and "is stale" in msg and str(out / "shards" / "1-of-2") in msg


def test_merge_refuses_another_fingerprint_an_unfinished_or_running_shard_and_mixed_splits(model_dir, small,
                                                                                          small_shards, tmp_path):
    from zcp.core.io import RunLock

    out = _copy(small_shards, tmp_path)
    sdir = out / "shards" / "1-of-2"
    meta = json.loads((sdir / "shard.json").read_text())
    # the same command but another plan (e.g. another tokenizer version on that node): the fingerprints differ
    (sdir / "shard.json").write_text(json.dumps({**meta, "fingerprint": "0" * 32}))
    msg = _merge_refused(model_dir, small, out)
    assert "shard 1/2" in msg and "differs from shard 0/2's" in msg
    (sdir / "shard.json").write_text(json.dumps(meta))
    # an unfinished shard (its last chunks lost): named, with the command that resumes it
    records = (sdir / "records.jsonl").read_text().splitlines()
    (sdir / "records.jsonl").write_text("\n".join(records[:5]) + "\n" + records[5][:20])  # and a torn last line
    msg = _merge_refused(model_dir, small, out)
    assert f"shard 1/2 is not finished ({sdir / 'records.jsonl'} holds 5 of its {len(records)} units)" in msg
    assert "run.shard=1/2 (it resumes)" in msg
    (sdir / "records.jsonl").write_text("\n".join(records) + "\n")
    with RunLock(sdir):  # a shard process still holds its lock
        assert "shard 1/2 is still running" in _merge_refused(model_dir, small, out)
    (out / "shards" / "0-of-3").mkdir()
    assert "shards of 2 and of 3 ways" in _merge_refused(model_dir, small, out)


@pytest.mark.parametrize("spec", ["2/2", "-1/2", "0/0", "1", "a/b", "1/2/3", "merged"])
def test_a_bad_shard_spec_is_refused_at_compose(spec):
    from zcp.config import validate

    cfg = compose("detect", "model.path=/nonexistent", f"run.shard={spec}")
    msg = _message(ConfigError, lambda: validate(cfg, job="detect"))
    assert msg.startswith(f"run.shard={spec!r}: must be i/n with integers 0 <= i < n"), msg


def test_shard_is_refused_by_jobs_that_do_not_shard_and_with_a_base_model():
    from zcp.config import validate

    cfg = compose("ablations", "run.shard=0/2")
    assert "only evaluate/run_detect.py shards" in _message(ConfigError, lambda: validate(cfg, job="ablations"))
    cfg = compose("detect", "model.path=/nonexistent", "base_model.path=/nonexistent", "run.shard=merge")
    msg = _message(ConfigError, lambda: validate(cfg, job="detect"))
    assert msg.startswith("run.shard='merge': must be null with base_model.path"), msg


def test_shards_the_merge_and_one_process_name_one_run_dir(model_dir, small):
    from zcp.config import run_dir
    from zcp.probe.shard import without_shard

    dirs = set()
    for extra in ([], ["run.shard=0/2"], ["run.shard=merge"]):
        cfg = compose("detect", *[o for o in _overrides(model_dir, small, Path("x")) if not o.startswith("output_dir")],
                      *extra)
        dirs.add(run_dir(without_shard(cfg), "detect", "bench"))
    assert len(dirs) == 1
    cfg = compose("detect", *[o for o in _overrides(model_dir, small, Path("x")) if not o.startswith("output_dir")])
    from omegaconf import OmegaConf

    from zcp.config import to_dict

    before = to_dict(cfg)
    del before["run"]["shard"]  # the config as it was before run.shard existed: the same hash, the same directory
    assert run_dir(OmegaConf.create(before), "detect", "bench") in dirs


@pytest.mark.slow  # ~13 s unloaded; make test-all. The fast suite keeps the kill-resume of detection (test_detect_e2e) and of the store (tests/core/test_records.py)
def test_a_shard_killed_with_sigkill_resumes_and_the_merge_equals_one_process(model_dir, tmp_path):
    """Shard 1/2 as a subprocess writing one unit per chunk (slow enough to be caught midway), SIGKILLed, refused by
    the merge as unfinished, resumed with another chunk size (no part of the run), merged: one process's files."""
    data = _bench(tmp_path, 150, m=2)
    out = tmp_path / "sharded"
    cmd = [sys.executable, str(REPO / "evaluate" / "run_detect.py"),
           *_overrides(model_dir, data, out, "run.shard=1/2", "run.chunk_size=1")]
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rec = out / "shards" / "1-of-2" / "records.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and (not rec.exists() or
                                                              len(rec.read_text().splitlines()) < 16):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    n_before = len(rec.read_text().splitlines())
    assert 16 <= n_before < 225, (n_before, err.decode()[-2000:])
    _run(model_dir, data, out, "run.shard=0/2")
    assert "shard 1/2 is not finished" in _merge_refused(model_dir, data, out)
    _run(model_dir, data, out, "run.shard=1/2")  # resumes
    _run(model_dir, data, out, "run.shard=merge")
    _run(model_dir, data, tmp_path / "one")
    _assert_same_run(tmp_path / "one", out)
    # a one-process rerun of the command on the merged directory finds every unit done and writes the same
    _run(model_dir, data, out)
    _assert_same_run(tmp_path / "one", out)
