"""Records carry what they were made with (prompt_hash, gold, answer_suffix, convention); a resume re-probes the
rows that do not match their planned unit and a shard merge refuses them (rows keyed by (split, variant,
original_id, draw) alone would be accepted and change the verdict)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeBackend

from zcp.core.records import RecordStore
from zcp.errors import RunDirError
from zcp.probe.detect import DetectDataset, DetectSettings, detect, plan_units
from zcp.probe.planned import planned_fields, unit_mismatch
from zcp.probe.prompts import ProbeConfig

Q = "Tom has {a} apples and buys {b} more. How many apples does Tom have now?"
PROBE = ProbeConfig(metrics=("p_first", "p_all"))
SETTINGS = DetectSettings(progress=False, bootstrap_samples=200)


def _data() -> list[DetectDataset]:
    from zcp.core.items import Item

    items = [Item(f"i{k}", Q.format(a=k + 3, b=k + 1), str(2 * k + 4)) for k in range(8)]
    ref = {it.id: [Item(f"{it.id}::r0", Q.format(a=k + 30, b=k + 1), str(2 * k + 31),
                        metadata={"original_id": it.id})] for k, it in enumerate(items)}
    return [DetectDataset("D", items, ref)]


def _backend() -> FakeBackend:
    # memorises half of the originals: their p is 0.9, everything else 0.1
    return FakeBackend({Q.format(a=k + 3, b=k + 1): str(2 * k + 4) for k in range(4)})


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def _unit(r: dict) -> tuple:
    return (r["split"], r["variant"], r["original_id"], r["draw"])


def _write(out: Path, rows: list[dict]) -> None:
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("field,value", [("prompt_hash", "0000000000000000"), ("answer_suffix", "\n"),
                                         ("convention", "boxed"), ("gold", "999")])
def test_a_resume_reprobes_rows_made_with_something_else(tmp_path, field, value):
    clean = detect(_backend(), _data(), PROBE, tmp_path / "clean", SETTINGS)
    out = tmp_path / "run"
    detect(_backend(), _data(), PROBE, out, SETTINGS)
    rows = _records(out)
    # the originals' rows as another configuration made them: another prompt (or end, convention, gold) and the
    # scores that came with it: every original looks memorised
    doctored = [{**r, field: value, "p_first": 0.99, "p_all": 0.99} if r["variant"] == "original" else r
                for r in rows]
    _write(out, doctored)
    (out / "summary.json").unlink()
    again = detect(_backend(), _data(), PROBE, out, SETTINGS)
    assert sorted(_records(out), key=_unit) == sorted(rows, key=_unit)  # re-probed: the clean run's records again
    assert again["verdicts"] == clean["verdicts"] and again["results"] == clean["results"]


def test_the_store_drops_mismatching_rows_before_keeping_the_first_copy(tmp_path):
    units, _ = plan_units(_backend(), _data(), PROBE, SETTINGS)
    check = unit_mismatch(planned_fields(units, _backend(), PROBE))
    out = tmp_path / "run"
    detect(_backend(), _data(), PROBE, out, SETTINGS)
    rows = _records(out)
    foreign = {**rows[0], "prompt_hash": "0000000000000000", "p_first": 0.5}
    _write(out, [foreign, *rows])  # a foreign first copy of unit 0, then the right one
    from zcp.core.rundir import detection_unit

    store = RecordStore(out / "records.jsonl", key=detection_unit)
    kept = store.load(expect=check)
    assert kept == rows and store.mismatched == 1
    assert _records(out) == rows  # the file rewritten without it
    why = check(foreign)
    assert why is not None and "prompt_hash" in why and foreign["prompt_hash"] in why


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_tok) -> Path:
    from zcp.core.testing import tiny_llama

    root = tmp_path_factory.mktemp("planned_model")
    tiny_llama(tiny_tok, hidden=32, layers=2, heads=2).save_pretrained(root)
    tiny_tok.save_pretrained(root)
    return root


def _run_detect(model: Path, tmp_path: Path, out: Path, *extra: str) -> dict:
    from configs import compose

    from zcp.benchmarks.loaders import save_items
    from zcp.probe.run import run_detect

    ds = _data()[0]
    save_items(tmp_path / "bench.jsonl", ds.originals)
    save_items(tmp_path / "ref.jsonl", [r for rows in ds.reference.values() for r in rows])
    return run_detect(compose("detect", f"model.path={model}", f"data.path={tmp_path / 'bench.jsonl'}",
                              f"data.reference_path={tmp_path / 'ref.jsonl'}", "data.format=items",
                              "data.name=bench", f"output_dir={out}", "logger=none", "run.progress=false",
                              "probe.metrics=[p_first,p_all]", "stats.bootstrap_samples=200", *extra))


def test_a_merge_refuses_a_shard_row_made_with_another_prompt(model_dir, tmp_path):
    out = tmp_path / "sharded"
    for i in range(2):
        _run_detect(model_dir, tmp_path, out, f"run.shard={i}/2")
    path = out / "shards" / "1-of-2" / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0] = {**rows[0], "prompt_hash": "0000000000000000", "p_first": 0.99}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RunDirError) as e:
        _run_detect(model_dir, tmp_path, out, "run.shard=merge")
    msg = str(e.value)
    assert "\n" not in msg and "shard 1/2" in msg and "prompt_hash 0000000000000000" in msg
    assert "delete" in msg and not (out / "records.jsonl").exists()
