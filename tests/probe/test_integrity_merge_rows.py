"""A shard merge refuses a row made with anything other than its planned unit's convention, answer end, gold answer
or prompt (rows keyed by (split, variant, original_id, draw) alone would be merged and change the verdict), naming
the shard, the unit and the field; nothing is written. The resume's side of the same rule is
test_planned_units.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from configs import compose

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.errors import RunDirError

Q = "Tom has {a} apples and buys {b} more. How many apples does Tom have now?"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_tok) -> tuple[Path, Path]:
    """A tiny model, 8 items with one reference row each, and a run split into two finished shards."""
    from zcp.core.testing import tiny_llama

    root = tmp_path_factory.mktemp("merge_rows")
    tiny_llama(tiny_tok, hidden=32, layers=2, heads=2).save_pretrained(root / "model")
    tiny_tok.save_pretrained(root / "model")
    items = [Item(f"i{k}", Q.format(a=k + 3, b=k + 1), str(2 * k + 4)) for k in range(8)]
    refs = [Item(f"i{k}::r0", Q.format(a=k + 30, b=k + 1), str(2 * k + 31), metadata={"original_id": f"i{k}"})
            for k in range(8)]
    save_items(root / "bench.jsonl", items)
    save_items(root / "ref.jsonl", refs)
    for i in range(2):
        _run(root, root / "run", f"run.shard={i}/2")
    return root, root / "run"


def _run(root: Path, out: Path, *extra: str) -> dict:
    from zcp.probe.run import run_detect

    return run_detect(compose("detect", f"model.path={root / 'model'}", f"data.path={root / 'bench.jsonl'}",
                              f"data.reference_path={root / 'ref.jsonl'}", "data.format=items", "data.name=bench",
                              f"output_dir={out}", "logger=none", "run.progress=false",
                              "probe.metrics=[p_first,p_all]", "stats.bootstrap_samples=200", *extra))


@pytest.mark.parametrize("field,value", [("convention", "boxed"), ("answer_suffix", "\n"), ("gold", "999")])
def test_a_merge_refuses_a_shard_row_made_otherwise(sharded, tmp_path, field, value):
    import shutil

    root, run = sharded
    out = tmp_path / "run"
    shutil.copytree(run, out)
    path = out / "shards" / "0-of-2" / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0] = {**rows[0], field: value, "p_first": 0.99, "p_all": 0.99}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RunDirError) as e:
        _run(root, out, "run.shard=merge")
    msg = str(e.value)
    assert "\n" not in msg and "shard 0/2" in msg and field in msg, msg
    assert not (out / "records.jsonl").exists() and not (out / "summary.json").exists()


def test_the_same_shards_untouched_merge(sharded, tmp_path):
    import shutil

    root, run = sharded
    out = tmp_path / "run"
    shutil.copytree(run, out)
    merged = _run(root, out, "run.shard=merge")
    assert merged["verdicts"] and (out / "records.jsonl").exists()
