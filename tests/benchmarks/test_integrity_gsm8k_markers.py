"""A GSM8K row whose answer holds two `####` markers has no one gold answer (the last one was taken without a word):
it is refused naming the file, row and field, by the loader and by the GSM8K reference builder's own reader
through run_build_data; `data.on_invalid=skip` leaves the row out, the rest is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from configs import compose

from zcp.errors import DataError

HEAD = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k" / "test_head12.jsonl"
TWO = {"question": "Ann has 3 apples and buys 4 more. How many apples does she have?",
       "answer": "She has 3+4=<<3+4=7>>7 apples.\n#### 7\nOr rather #### 8"}


@pytest.fixture
def data(tmp_path) -> Path:
    rows = [json.loads(line) for line in HEAD.read_text().splitlines()][:6]
    rows.insert(2, TWO)  # row 3 of the file
    path = tmp_path / "gsm8k_test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_loader_skips_it_with_on_invalid_skip_and_says_why(data):
    from zcp.benchmarks.loaders import load_items

    skipped: list[dict] = []
    items = load_items(data, "gsm8k", on_invalid="skip", skipped=skipped)
    assert len(items) == 6 and TWO["question"] not in {it.question for it in items}
    assert len(skipped) == 1 and skipped[0]["row"] == 3 and "2 '####' markers" in json.dumps(skipped[0])


def _build(data: Path, out: Path, *extra: str):
    from zcp.benchmarks.build import build_data

    return build_data(compose("build_data", "data=gsm8k", f"data.path={data}", "reference=gsm8k", "reference.m=1",
                              "paraphrase=none", "logger=none", f"output_dir={out}", *extra))


def test_build_data_refuses_the_row_naming_file_and_row(data, tmp_path):
    with pytest.raises(DataError) as e:
        _build(data, tmp_path / "out")
    msg = str(e.value)
    assert "\n" not in msg and str(data) in msg and "row 3" in msg and "2 '####' markers" in msg
    assert not (tmp_path / "out" / "reference.jsonl").exists()


def test_build_data_with_on_invalid_skip_builds_the_rest(data, tmp_path):
    report = _build(data, tmp_path / "out", "data.on_invalid=skip")
    items = [json.loads(line) for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    refs = [json.loads(line) for line in (tmp_path / "out" / "reference.jsonl").read_text().splitlines()]
    assert len(items) == 6 and all(it["question"] != TWO["question"] for it in items)
    assert {r["metadata"]["original_id"] for r in refs} <= {it["id"] for it in items}
    assert report["counts"]["skipped_rows"] == 1
