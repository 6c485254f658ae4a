"""Loaders and adapters: GSM8K, the ZCP release conventions, generic JSONL, reference pairing, errors."""

import json

import pytest

from zcp.data.loaders import load_items, load_paired, save_items
from zcp.data.schema import DataError, Item


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gsm8k_shared_file(shared_data):
    items = load_items(shared_data / "gsm8k" / "test.jsonl", "gsm8k")
    assert len(items) == 1319
    assert items[0].id == "gsm8k-00000" and items[0].answer == "18"
    assert "<<" in items[0].solution and "####" not in items[0].solution
    assert all("," not in it.answer for it in items)


def test_zcp_release_bare_and_skip(shared_data):
    path = shared_data / "zcp-release" / "omnimath" / "dataset_c.jsonl"
    with pytest.raises(DataError, match=r"row 2154, field 'answer'"):
        load_items(path, "zcp_release")
    skipped = []
    items = load_items(path, "zcp_release", on_invalid="skip", skipped=skipped)
    assert len(items) == 2172 - 4 and [s["row"] for s in skipped] == [2154, 2159, 2161, 2169]
    assert items[0].solution and items[0].answer == "2 \\sqrt{2}-2"


def test_zcp_release_prefix_convention(tmp_path):
    row = {"original_problem": "What is 2+3?", "original_answer": "5", "paraphrased_problem": "Add 2 and 3.",
           "answer": "5", "modified_problem": "What is 4+3?", "modified_answer": "7"}
    path = _write(tmp_path / "rel.jsonl", [row])
    assert load_items(path, "zcp_release", variant="original")[0].question == "What is 2+3?"
    para = load_items(path, "zcp_release", variant="paraphrased")[0]
    assert (para.question, para.answer) == ("Add 2 and 3.", "5")
    mod = load_items(path, "zcp_release", variant="modified")[0]
    assert (mod.question, mod.answer) == ("What is 4+3?", "7")


def test_generic_jsonl_fields_and_parquet(tmp_path):
    path = _write(tmp_path / "g.jsonl", [{"uid": "a", "problem": "1+1?", "final": 2}, {"uid": "b", "problem": "2+2?", "final": 4}])
    items = load_items(path, "jsonl", fields={"id": "uid", "question": "problem", "answer": "final"})
    assert [(i.id, i.question, i.answer) for i in items] == [("a", "1+1?", "2"), ("b", "2+2?", "4")]
    import datasets

    pq = tmp_path / "g.parquet"
    datasets.Dataset.from_list([{"id": "x", "question": "q", "answer": "1"}]).to_parquet(str(pq))
    assert load_items(pq)[0].id == "x"


def test_errors_name_file_row_field(tmp_path):
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "question": \n')
    with pytest.raises(DataError, match=r"bad.jsonl, row 2: invalid JSON"):
        load_items(bad_json)
    dup = _write(tmp_path / "dup.jsonl", [{"id": "a", "question": "q", "answer": "1"}] * 2)
    with pytest.raises(DataError, match=r"row 2, field 'id': duplicate id 'a' \(first seen at row 1\)"):
        load_items(dup)
    missing = _write(tmp_path / "m.jsonl", [{"id": "a", "question": "q", "answer": "1"}, {"id": "b", "question": "q"}])
    with pytest.raises(DataError, match=r"m.jsonl, row 2, field 'answer': missing"):
        load_items(missing)
    no_marker = _write(tmp_path / "g.jsonl", [{"question": "q", "answer": "just 5"}])
    with pytest.raises(DataError, match=r"row 1, field 'answer': no '#### <final answer>' marker"):
        load_items(no_marker, "gsm8k")
    with pytest.raises(DataError, match="file not found"):
        load_items(tmp_path / "nope.jsonl")


def test_reference_pairing_all_link_styles(tmp_path):
    orig = [Item("a", "q1", "1"), Item("b", "q2", "2")]
    by_oid = _write(tmp_path / "r1.jsonl", [
        {"id": "a::ref0", "original_id": "a", "question": "q1'", "answer": "3"},
        {"id": "a::ref1", "original_id": "a", "question": "q1''", "answer": "4"},
        {"id": "b::ref0", "original_id": "b", "question": "q2'", "answer": "5"},
    ])
    ref = load_paired(by_oid, orig)
    assert [r.answer for r in ref["a"]] == ["3", "4"] and len(ref["b"]) == 1
    by_index = _write(tmp_path / "r2.jsonl", [{"original_index": 1, "question": "x", "answer": "9"},
                                             {"original_index": 0, "question": "y", "answer": "8"}])
    assert load_paired(by_index, orig)["b"][0].answer == "9"
    by_id = _write(tmp_path / "r3.jsonl", [{"id": "a", "question": "x", "answer": "9"}, {"id": "a", "question": "z", "answer": "7"},
                                          {"id": "b", "question": "y", "answer": "8"}])
    assert len(load_paired(by_id, orig)["a"]) == 2


def test_reference_pairing_errors(tmp_path):
    orig = [Item("a", "q1", "1"), Item("b", "q2", "2")]
    unknown = _write(tmp_path / "u.jsonl", [{"original_id": "a", "question": "x", "answer": "1"},
                                           {"original_id": "zz", "question": "x", "answer": "1"}])
    with pytest.raises(DataError, match=r"u.jsonl, row 2, field 'original_id': names original 'zz'"):
        load_paired(unknown, orig)
    missing = _write(tmp_path / "mi.jsonl", [{"original_id": "a", "question": "x", "answer": "1"}])
    with pytest.raises(DataError, match=r"mi.jsonl: 1 original item\(s\) have no reference row: b"):
        load_paired(missing, orig)
    out_of_range = _write(tmp_path / "o.jsonl", [{"original_index": 5, "question": "x", "answer": "1"}])
    with pytest.raises(DataError, match=r"row 1, field 'original_index': index 5 out of range"):
        load_paired(out_of_range, orig)


def test_save_items_roundtrip(tmp_path):
    items = [Item("a::ref0", "q", "1", "sol", {"original_id": "a", "draw": 0})]
    save_items(tmp_path / "x.jsonl", items)
    back = load_items(tmp_path / "x.jsonl", unique_ids=False)
    assert back[0].metadata["original_id"] == "a" and back[0].solution == "sol" and back[0].metadata["draw"] == 0
