"""Loaders and adapters: GSM8K, the ZCP release layouts, generic JSONL, answers kept as the file's text,
pairing by a declared key, selection (limit/sample/skip) before pairing, one-line errors, warnings."""

import json
from pathlib import Path

import pytest
from configs import compose
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from zcp.benchmarks.loaders import load_benchmark, load_items, load_paired, save_items
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError
from zcp.probe.datasets import load_datasets

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELEASE = FIXTURES / "zcp-release"
PARAPHRASED = RELEASE / "gsm8k_train_paraphrased_dataset_rows1-3.jsonl"  # original_index 4, 17, 26
MULTI = RELEASE / "multi_domain_dataset_c_rows1-4.jsonl"                # original_index xfinbench_27, ...
OMNI = RELEASE / "omnimath_dataset_c_rows1-6_2154.jsonl"                # bare; row 7 has an empty answer


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(**kw):
    return OmegaConf.create({"name": "x", "format": "items", "reference_format": "items", **kw})


def _one_line(e: BaseException) -> str:
    msg = str(e)
    assert len(msg.splitlines()) == 1, msg
    return msg


# ------------------------------------------------------------------------------------------ formats


def test_gsm8k_shared_file(shared_data):
    items = load_items(shared_data / "gsm8k" / "test.jsonl", "gsm8k")
    assert len(items) == 1319
    assert items[0].id == "gsm8k_test-00000" and items[0].answer == "18"
    assert "<<" in items[0].solution and "####" not in items[0].solution
    assert all("," not in it.answer for it in items)


def test_gsm8k_fixture_slice():
    items = load_items(FIXTURES / "gsm8k" / "test_head12.jsonl", "gsm8k")
    assert len(items) == 12 and items[0].id == "gsm8k_test_head12-00000" and items[0].answer == "18"


def test_gsm8k_ids_name_the_split(tmp_path):
    """Generated GSM8K ids carry the file's split (its stem), so test and train never share an id; ids written in
    the file are kept; the reference builder's reader gives the same ids as the loader."""
    from zcp.benchmarks.references.gsm8k import gsm8k_item

    rows = [{"question": f"Tom has {n} apples. How many?", "answer": f"He has {n}.\n#### {n}"} for n in (3, 4)]
    for split in ("test", "train"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    test, train = (load_items(tmp_path / f"{s}.jsonl", "gsm8k") for s in ("test", "train"))
    assert [it.id for it in test] == ["gsm8k_test-00000", "gsm8k_test-00001"]
    assert [it.id for it in train] == ["gsm8k_train-00000", "gsm8k_train-00001"]
    assert [gsm8k_item(r, i, str(tmp_path / "train.jsonl")).id for i, r in enumerate(rows)] == [it.id for it in train]
    (tmp_path / "gsm8k_dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_items(tmp_path / "gsm8k_dev.jsonl", "gsm8k")[1].id == "gsm8k_dev-00001"  # not gsm8k_gsm8k_dev
    (tmp_path / "with_ids.jsonl").write_text("".join(json.dumps({**r, "id": f"q{i}"}) + "\n" for i, r in enumerate(rows)))
    assert [it.id for it in load_items(tmp_path / "with_ids.jsonl", "gsm8k")] == ["q0", "q1"]


def test_zcp_release_bare_and_skip(shared_data):
    path = shared_data / "zcp-release" / "omnimath" / "dataset_c.jsonl"
    with pytest.raises(DataError, match=r"row 2154, field 'answer'"):
        load_items(path, "zcp_release")
    skipped = []
    # the release repeats 4 questions (same answers): merged, the later rows listed (tests/benchmarks/test_loaders_duplicates.py)
    items = load_items(path, "zcp_release", on_invalid="skip", on_duplicate="merge", skipped=skipped)
    assert len(items) == 2172 - 4 - 4 and [s["row"] for s in skipped] == [2154, 2159, 2161, 2169, 512, 785, 845, 1899]
    assert items[0].solution and items[0].answer == "2 \\sqrt{2}-2"


def test_zcp_release_bare_fixture_slice():
    with pytest.raises(DataError, match=r"omnimath_dataset_c_rows1-6_2154.jsonl, row 7, field 'answer': missing"):
        load_items(OMNI, "zcp_release")
    skipped = []
    items = load_items(OMNI, "zcp_release", on_invalid="skip", skipped=skipped)
    assert len(items) == 6 and [s["row"] for s in skipped] == [7]
    assert items[0].answer == "2 \\sqrt{2}-2" and items[1].answer == "\\varnothing"


def test_zcp_release_prefix_convention(tmp_path):
    row = {"original_problem": "What is 2+3?", "original_answer": "5", "paraphrased_problem": "Add 2 and 3.",
           "answer": "5", "modified_problem": "What is 4+3?", "modified_answer": "7"}
    path = _write(tmp_path / "rel.jsonl", [row])
    assert load_items(path, "zcp_release", variant="original")[0].question == "What is 2+3?"
    para = load_items(path, "zcp_release", variant="paraphrased")[0]
    assert (para.question, para.answer) == ("Add 2 and 3.", "5")
    mod = load_items(path, "zcp_release", variant="modified")[0]
    assert (mod.question, mod.answer) == ("What is 4+3?", "7")


def test_zcp_release_paraphrased_layout_fixture():
    orig = load_items(PARAPHRASED, "zcp_release", variant="original")
    para = load_items(PARAPHRASED, "zcp_release", variant="paraphrased")
    assert [it.answer for it in orig] == [it.answer for it in para] == ["624", "43", "400"]
    assert orig[0].question.startswith("James writes") and para[0].question.startswith("Throughout each week")
    assert [it.metadata["original_index"] for it in orig] == ["4", "17", "26"]
    with pytest.raises(DataError, match=r"row 1, field 'question': missing: this file uses the <prefix>_problem"):
        load_items(PARAPHRASED, "zcp_release")  # no variant on a prefixed file: say which to choose


def test_zcp_release_multi_domain_problem_field():
    """Old code: 'question' missing (multi-domain files name it 'problem')."""
    items = load_items(MULTI, "zcp_release")
    assert [it.answer for it in items] == ["0.079", "0.39", "35.0", "350000.0"]
    assert items[0].question.startswith("Southern Alliance") and items[0].solution is None
    assert load_items(MULTI, "zcp_release", variant="original")[2].answer == "35.0"


def test_zcp_release_variant_honoured_or_error(tmp_path):
    """Old code: variant=paraphrased on a bare file silently read the bare question."""
    bare = _write(tmp_path / "bare.jsonl", [{"question": "What is 2+3?", "answer": "5"}])
    for v in ("paraphrased", "modified", "original"):
        with pytest.raises(DataError, match=r"bare.jsonl, row 1, field '\w+_problem': missing .*bare file"):
            load_items(bare, "zcp_release", variant=v)
    with pytest.raises(DataError, match="unknown variant 'rephrased'"):
        load_items(bare, "zcp_release", variant="rephrased")
    with pytest.raises(DataError, match="applies to format zcp_release only"):
        load_items(bare, "jsonl", variant="original")
    no_mod_answer = _write(tmp_path / "m.jsonl", [{"modified_problem": "What is 4+3?", "answer": "5"}])
    with pytest.raises(DataError, match=r"row 1, field 'modified_answer': missing"):
        load_items(no_mod_answer, "zcp_release", variant="modified")  # never the original's answer


def test_generic_jsonl_fields_and_parquet(tmp_path):
    path = _write(tmp_path / "g.jsonl", [{"uid": "a", "problem": "1+1?", "final": 2}, {"uid": "b", "problem": "2+2?", "final": 4}])
    items = load_items(path, "jsonl", fields={"id": "uid", "question": "problem", "answer": "final"})
    assert [(i.id, i.question, i.answer) for i in items] == [("a", "1+1?", "2"), ("b", "2+2?", "4")]
    import datasets

    pq = tmp_path / "g.parquet"
    datasets.Dataset.from_list([{"id": "x", "question": "q", "answer": "1"}]).to_parquet(str(pq))
    assert load_items(pq)[0].id == "x"
    with pytest.raises(DataError, match="unknown key 'questoin'"):
        load_items(path, "jsonl", fields={"questoin": "problem"})
    with pytest.raises(DataError, match="applies to format jsonl or items"):
        load_items(path, "gsm8k", fields={"question": "problem"})


# ------------------------------------------------------------------------------------------ answers


def test_answers_keep_the_file_text(tmp_path):
    """Old code (Arrow type inference): 29 next to 2.5 became "29.0"."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": "a", "question": "q1", "answer": 2.5}\n{"id": "b", "question": "q2", "answer": 29}\n'
                    '{"id": "c", "question": "q3", "answer": 2.50}\n{"id": "d", "question": "q4", "answer": "007"}\n'
                    '{"id": "e", "question": "q5", "answer": 1E+3, "metadata": {"draw": 3, "w": 0.5}}\n')
    items = load_items(path)
    assert [it.answer for it in items] == ["2.5", "29", "2.50", "007", "1E+3"]
    assert items[4].metadata["draw"] == 3 and items[4].metadata["w"] == 0.5  # metadata keeps its JSON types
    arr = tmp_path / "a.json"
    arr.write_text('[{"id": "a", "question": "q1", "answer": 2.5}, {"id": "b", "question": "q2", "answer": 29}]')
    assert [it.answer for it in load_items(arr)] == ["2.5", "29"]


def test_answers_through_load_datasets(tmp_path):
    """The reviewer's case end to end: gold answers of data and reference stay as written."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "question": "Half of 5?", "answer": 2.5}\n{"id": "b", "question": "29?", "answer": 29}\n')
    ref = tmp_path / "r.jsonl"
    ref.write_text('{"original_id": "a", "question": "Half of 7?", "answer": 3.5}\n'
                   '{"original_id": "b", "question": "31?", "answer": 31}\n')
    (ds,), issues = load_datasets(_cfg(path=str(data), reference_path=str(ref)))
    assert [it.answer for it in ds.originals] == ["2.5", "29"]
    assert [ds.reference[k][0].answer for k in ("a", "b")] == ["3.5", "31"] and not issues


def test_parquet_float_answer_column_warns(tmp_path):
    """A float-typed parquet column has lost its text: integral values read as integers, with a warning."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "question": ["q1", "q2"], "answer": [2.5, 29.0]}), path)
    warnings = []
    items = load_items(path, warnings=warnings)
    assert [it.answer for it in items] == ["2.5", "29"]
    assert len(warnings) == 1 and "float-typed" in warnings[0]["warning"] and "29.0 -> '29'" in warnings[0]["warning"]
    pq.write_table(pa.table({"id": ["a"], "question": ["q1"], "answer": ["29"], "score": [1.0]}), path)
    warnings = []
    assert load_items(path, warnings=warnings)[0].answer == "29" and not warnings  # only the answer column matters


# ------------------------------------------------------------------------------------------ errors


def test_errors_name_file_row_field(tmp_path):
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "question": \n')
    with pytest.raises(DataError, match=r"bad.jsonl, row 2: invalid JSON"):
        load_items(bad_json)
    dup = _write(tmp_path / "dup.jsonl", [{"id": "a", "question": "q", "answer": "1"}] * 2)
    with pytest.raises(DataError, match=r"row 2, field 'id': duplicate id 'a' \(first seen at row 1\)"):
        load_items(dup)
    missing = _write(tmp_path / "m.jsonl", [{"id": "a", "question": "q", "answer": "1"}, {"id": "b", "question": "q"}])
    with pytest.raises(DataError, match=r"m.jsonl, row 2, field 'answer': missing \(fields present: id, question\)"):
        load_items(missing)
    no_marker = _write(tmp_path / "g.jsonl", [{"question": "q", "answer": "just 5"}])
    with pytest.raises(DataError, match=r"row 1, field 'answer': no '#### <final answer>' marker"):
        load_items(no_marker, "gsm8k")
    two = _write(tmp_path / "two.jsonl", [{"question": "q", "answer": "3 + 4 = 7 #### 7\nso #### 8"}])
    with pytest.raises(DataError, match=r"two.jsonl, row 1, field 'answer': 2 '####' markers"):
        load_items(two, "gsm8k")
    with pytest.raises(DataError, match="file not found"):
        load_items(tmp_path / "nope.jsonl")
    wrong = _write(tmp_path / "w.jsonl", [{"id": "a", "question": "q", "answer": [1, 2]}])
    with pytest.raises(DataError, match=r"w.jsonl, row 1, field 'answer': must be text or a number, not an array"):
        load_items(wrong)


def test_empty_file_and_non_utf8_are_one_line_errors(tmp_path):
    """Old code: 'could not be read by datasets: ' and nothing more; a bare UnicodeDecodeError."""
    for name, content in (("e.jsonl", b""), ("blank.jsonl", b"\n  \n"), ("e.json", b"")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(DataError) as e:
            load_items(tmp_path / name)
        assert _one_line(e.value) == f"file {tmp_path / name}: empty file: no rows"
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "a", "question": "q", "answer": "1"}\n\n{"id": "b", "question": "caf\xe9", "answer": "2"}\n')
    with pytest.raises(DataError) as e:
        load_items(latin)
    assert _one_line(e.value) == f"file {latin}, row 3: not valid UTF-8: byte 0xe9 at column 29"
    with pytest.raises(DataError, match=r"row 1: a row must be a JSON object, not an array"):
        load_items(_write(tmp_path / "arr.jsonl", [[1, 2]]))
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"id": "a", "question": "q", "answer": NaN}\n')
    with pytest.raises(DataError, match=r"nan.jsonl, row 1: invalid JSON \(NaN is not a JSON number\)"):
        load_items(nan)


# ------------------------------------------------------------------------------------------ pairing


def test_reference_pairing_all_link_styles(tmp_path):
    orig = [Item("a", "q1", "1"), Item("b", "q2", "2")]
    by_oid = _write(tmp_path / "r1.jsonl", [
        {"id": "a::ref0", "original_id": "a", "question": "q1'", "answer": "3"},
        {"id": "a::ref1", "original_id": "a", "question": "q1''", "answer": "4"},
        {"id": "b::ref0", "original_id": "b", "question": "q2'", "answer": "5"},
    ])
    ref = load_paired(by_oid, orig)
    assert [r.answer for r in ref["a"]] == ["3", "4"] and len(ref["b"]) == 1
    by_position = _write(tmp_path / "r2.jsonl", [{"original_index": 1, "question": "x", "answer": "9"},
                                                {"original_index": 0, "question": "y", "answer": "8"}])
    assert load_paired(by_position, orig, pair_by="position")["b"][0].answer == "9"
    by_id = _write(tmp_path / "r3.jsonl", [{"id": "a", "question": "x", "answer": "9"}, {"id": "a", "question": "z", "answer": "7"},
                                          {"id": "b", "question": "y", "answer": "8"}])
    assert len(load_paired(by_id, orig)["a"]) == 2


def test_reference_pairing_errors(tmp_path):
    orig = [Item("a", "q1", "1"), Item("b", "q2", "2")]
    unknown = _write(tmp_path / "u.jsonl", [{"original_id": "a", "question": "x", "answer": "1"},
                                           {"original_id": "zz", "question": "x", "answer": "1"}])
    with pytest.raises(DataError, match=r"u.jsonl, row 2, field 'original_id': names original 'zz', which is not in "
                                        r"the dataset \(pair_by=original_id\)"):
        load_paired(unknown, orig)
    missing = _write(tmp_path / "mi.jsonl", [{"original_id": "a", "question": "x", "answer": "1"}])
    with pytest.raises(DataError, match=r"mi.jsonl: 1 original item\(s\) have no reference row: b"):
        load_paired(missing, orig)
    out_of_range = _write(tmp_path / "o.jsonl", [{"original_index": 5, "question": "x", "answer": "1"}])
    with pytest.raises(DataError, match=r"row 1, field 'original_index': position 5 is out of range"):
        load_paired(out_of_range, orig, pair_by="position")
    mixed = _write(tmp_path / "mx.jsonl", [{"original_id": "a", "question": "x", "answer": "1"},
                                          {"original_index": 1, "question": "y", "answer": "1"}])
    with pytest.raises(DataError, match=r"mx.jsonl, row 2, field 'original_id': missing \(pair_by=original_id"):
        load_paired(mixed, orig)
    nothing = _write(tmp_path / "n.jsonl", [{"question": "x", "answer": "1"}])
    with pytest.raises(DataError, match=r"n.jsonl, row 1: the rows name no original item"):
        load_paired(nothing, orig)


def test_original_index_is_the_source_index_not_a_position(tmp_path):
    """Old code read original_index as a 0-based row position: a release-style file (source indices that
    happen to be valid positions) paired every row to the wrong item without a word."""
    data = _write(tmp_path / "d.jsonl", [{"original_index": k, "question": f"Q{k}", "answer": str(k)} for k in (2, 0, 1)])
    ref = _write(tmp_path / "r.jsonl", [{"original_index": k, "original_problem": f"Q{k}", "question": f"Q{k}'",
                                         "answer": str(k + 10)} for k in (0, 1, 2)])
    bench = load_benchmark(data, "jsonl")
    paired = load_paired(ref, bench, "jsonl")
    assert {k: [r.question for r in v] for k, v in paired.items()} == {
        "d-00000": ["Q2'"], "d-00001": ["Q0'"], "d-00002": ["Q1'"]}
    (ds,), _ = load_datasets(_cfg(path=str(data), format="jsonl", reference_path=str(ref), reference_format="jsonl"))
    assert {it.question: ds.reference[it.id][0].question for it in ds.originals} == {"Q2": "Q2'", "Q0": "Q0'", "Q1": "Q1'"}
    # the release's own identifiers pair as text ("xfinbench_27"), and the data may call the field index/idx
    idx = _write(tmp_path / "i.jsonl", [{"idx": "x_7", "question": "A", "answer": "1"}])
    assert list(load_paired(_write(tmp_path / "ri.jsonl", [{"original_index": "x_7", "question": "B", "answer": "2"}]),
                            load_benchmark(idx, "jsonl"))) == ["i-00000"]


def test_position_pairing_only_when_asked(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"question": f"Q{k}", "answer": str(k)} for k in range(3)])
    ref = _write(tmp_path / "r.jsonl", [{"original_index": k, "question": f"Q{k}'", "answer": "9"} for k in range(3)])
    with pytest.raises(DataError) as e:
        load_paired(ref, load_benchmark(data, "jsonl"))
    assert "carry none" in _one_line(e.value) and "data.pair_by=position" in str(e.value)
    assert sorted(load_paired(ref, load_benchmark(data, "jsonl"), pair_by="position")) == ["d-00000", "d-00001", "d-00002"]


def test_original_text_mismatch_is_an_error(tmp_path):
    data = _write(tmp_path / "d.jsonl", [{"id": "a", "question": "What is\n2+3?", "answer": "5"},
                                         {"id": "b", "question": "What is 4+4?", "answer": "8"}])
    good = _write(tmp_path / "g.jsonl", [{"original_id": "a", "original_question": "What is  2+3?", "question": "What is 2+4?",
                                          "answer": "6"}])
    assert len(load_paired(good, load_benchmark(data), require_all=False)["a"]) == 1  # whitespace does not count
    bad = _write(tmp_path / "b.jsonl", [{"original_id": "b", "original_question": "What is 2+3?", "question": "x",
                                         "answer": "6"}])
    with pytest.raises(DataError) as e:
        load_paired(bad, load_benchmark(data), require_all=False)
    msg = _one_line(e.value)
    assert msg.startswith(f"file {bad}, row 1, field 'original_question': the original's text 'What is 2+3?' differs "
                          f"from the question of data item 'b' (row 2 of data file {data})")


def test_skipped_item_reference_rows_do_not_shift(tmp_path):
    """Old code: with on_invalid=skip, the skipped item's reference rows (by position) went to the next item."""
    data = _write(tmp_path / "d.jsonl", [{"question": "Q0", "answer": "0"}, {"question": "Q1", "answer": ""},
                                         {"question": "Q2", "answer": "2"}])
    ref = _write(tmp_path / "r.jsonl", [{"original_index": k, "question": f"Q{k}'", "answer": "9"} for k in range(3)])
    (ds,), issues = load_datasets(_cfg(path=str(data), format="jsonl", reference_path=str(ref),
                                       reference_format="jsonl", on_invalid="skip", pair_by="position"))
    assert {it.question: [r.question for r in ds.reference[it.id]] for it in ds.originals} == {"Q0": ["Q0'"], "Q2": ["Q2'"]}
    assert [(s["row"], s["field"]) for s in issues] == [(2, "answer")]


def test_identical_reference_warns(tmp_path):
    """Old code: a reference file identical to the data ran to 'no evidence' (C_cont 0.5) without a word."""
    data = _write(tmp_path / "d.jsonl", [{"id": f"i{k}", "question": f"What is {k}+{k}?", "answer": str(2 * k)}
                                         for k in range(4)])
    (ds,), issues = load_datasets(_cfg(path=str(data), reference_path=str(data)))
    assert len(ds.originals) == 4
    assert [w["file"] for w in issues] == [str(data)]
    assert "reference set identical to the data: all 4 reference rows repeat" in issues[0]["warning"]
    ref = _write(tmp_path / "r.jsonl", [{"original_id": f"i{k}", "question": f"What is {k}+{k}?" if k == 0 else f"What is {k}+9?",
                                         "answer": "0"} for k in range(4)])
    _, issues = load_datasets(_cfg(path=str(data), reference_path=str(ref)))
    assert "1 of 4 reference rows repeat" in issues[0]["warning"]


# ------------------------------------------------------------------------------------------ selection


def _bench_files(tmp_path, n=20, m=2):
    data = _write(tmp_path / "d.jsonl", [{"id": f"i{k:02d}", "question": f"Q{k}", "answer": str(k)} for k in range(n)])
    ref = _write(tmp_path / "r.jsonl", [{"original_id": f"i{k:02d}", "question": f"Q{k}/{j}", "answer": str(k + j + 1)}
                                        for k in range(n) for j in range(m)])
    return data, ref


def test_limit_with_a_reference_of_the_full_benchmark(tmp_path):
    """Old code: 'names original ... which is not in the dataset', also with missing_reference=skip."""
    data, ref = _bench_files(tmp_path)
    for missing in ("error", "skip"):
        (ds,), issues = load_datasets(_cfg(path=str(data), reference_path=str(ref), limit=3, missing_reference=missing))
        assert [it.id for it in ds.originals] == ["i00", "i01", "i02"] and not issues
        assert sorted(ds.reference) == ["i00", "i01", "i02"] and all(len(v) == 2 for v in ds.reference.values())


def test_sample_is_a_seeded_random_draw(tmp_path):
    """Old code: data.sample did not exist (the whole file was used)."""
    data, ref = _bench_files(tmp_path)
    picks = {}
    for seed in (0, 1):
        (ds,), _ = load_datasets(_cfg(path=str(data), reference_path=str(ref), sample=5, sample_seed=seed))
        picks[seed] = [it.id for it in ds.originals]
        assert len(picks[seed]) == 5 and picks[seed] == sorted(picks[seed])  # kept in file order
        assert set(ds.reference) == set(picks[seed])
    assert picks[0] != [f"i{k:02d}" for k in range(5)] and picks[0] != picks[1]
    (ds,), _ = load_datasets(_cfg(path=str(data), reference_path=str(ref), sample=5, sample_seed=0))
    assert [it.id for it in ds.originals] == picks[0]
    with pytest.raises(ConfigError, match=r"data\.sample=5: must be null when data\.limit is set"):
        load_datasets(_cfg(path=str(data), reference_path=str(ref), sample=5, limit=5))  # DataConfig refuses both


def test_skipped_rows_only_among_the_rows_considered(tmp_path):
    rows = [{"id": f"i{k}", "question": f"Q{k}", "answer": "" if k in (1, 8) else str(k)} for k in range(10)]
    data = _write(tmp_path / "d.jsonl", rows)
    skipped = []
    assert [it.id for it in load_items(data, limit=3, on_invalid="skip", skipped=skipped)] == ["i0", "i2", "i3"]
    assert [s["row"] for s in skipped] == [2]
    half_bad = _write(tmp_path / "h.jsonl", [{"id": f"i{k}", "question": f"Q{k}", "answer": "" if k % 2 else str(k)}
                                             for k in range(100)])
    bench = load_benchmark(half_bad, sample=2, seed=0, on_invalid="skip")
    assert len(bench.items) == 2 and len(bench.skipped) < 10  # not the 50 bad rows of the whole file
    assert all(s["row"] % 2 == 0 for s in bench.skipped)


def test_manifest_with_limit_keeps_the_selected_items(tmp_path):
    from zcp.benchmarks.split import split_items

    data, ref = _bench_files(tmp_path, n=10, m=1)
    manifest = split_items(load_items(data), seed=1)
    manifest.save(tmp_path / "manifest.json")
    out, _ = load_datasets(_cfg(path=str(data), reference_path=str(ref), limit=4, manifest=str(tmp_path / "manifest.json")))
    got = {d.split: [it.id for it in d.originals] for d in out}
    assert sorted(got["C"] + got["U"]) == ["i00", "i01", "i02", "i03"]
    assert set(got["C"]) <= set(manifest.c_ids) and set(got["U"]) <= set(manifest.u_ids)


# ------------------------------------------------------------------------------------------ released layouts


def test_variant_files_use_the_data_format_and_prefix():
    """Old code: variant files were always read as zcp items (no format or field map passed)."""
    cfg = _cfg(path=str(PARAPHRASED), format="zcp_release", variant="original", reference_path=str(PARAPHRASED),
               reference_format="zcp_release", reference_variant="paraphrased",
               variant_paths={"paraphrased": str(PARAPHRASED)})
    (ds,), issues = load_datasets(cfg)
    para = ds.variants["paraphrased"]
    assert [para[it.id][0].question[:20] for it in ds.originals] == [
        "Throughout each week", "A cargo trailer hold", "Sam ends up marooned"]
    assert [para[it.id][0].answer for it in ds.originals] == ["624", "43", "400"]
    # the paraphrases stand in for the reference here: each shares its original's answer, one warning per row
    assert [x["warning"] for x in issues] == [f"reference answer equals the original's ({a})" for a in ("624", "43", "400")]


def _modified(tmp_path, originals, key):
    """A release-style reference file: modified_problem/modified_answer, original_index and original_problem."""
    rows = [{"original_index": it.metadata.get("original_index", k), "original_problem": it.question,
             "modified_problem": it.question.replace("2", "3", 1) + " (perturbed)", "modified_answer": f"{k}.5"}
            for k, it in enumerate(originals)]
    return _write(tmp_path / f"{key}_modified.jsonl", rows[::-1])


def test_readme_commands_per_released_layout(tmp_path):
    """docs/benchmarks.md's overrides for each released layout, through a real Hydra compose and load_datasets."""
    # bare (Omni-MATH dataset_c/u) with a reference from evaluate/run_build_data.py (zcp items, original_id)
    omni = load_items(OMNI, "zcp_release", on_invalid="skip")
    save_items(tmp_path / "omni_ref.jsonl", [Item(f"{it.id}::ref0", it.question + " (v2)", "1", metadata={"original_id": it.id})
                                             for it in omni])
    cfg = compose("detect", "data=omnimath", f"data.path={OMNI}",
                  f"data.reference_path={tmp_path / 'omni_ref.jsonl'}")
    (ds,), issues = load_datasets(cfg.data)
    assert len(ds.originals) == 6 and [s.get("row") for s in issues] == [7]
    # paraphrased layout (gsm8k_train/math paraphrased_dataset.jsonl) + a modified (reference) file
    orig = load_items(PARAPHRASED, "zcp_release", variant="original")
    mod = _modified(tmp_path, orig, "para")
    cfg = compose("detect", f"data.path={PARAPHRASED}", "data.format=zcp_release", "data.variant=original",
                  f"data.reference_path={mod}", "data.reference_format=zcp_release",
                  "data.reference_variant=modified", f"data.variant_paths.paraphrased={PARAPHRASED}")
    (ds,), issues = load_datasets(cfg.data)
    assert [ds.reference[it.id][0].answer for it in ds.originals] == ["0.5", "1.5", "2.5"] and not issues
    assert all(len(ds.variants["paraphrased"][it.id]) == 1 for it in ds.originals)
    # multi-domain layout (original_index like "xfinbench_27", field problem)
    multi = load_items(MULTI, "zcp_release")
    mod = _modified(tmp_path, multi, "multi")
    cfg = compose("detect", f"data.path={MULTI}", "data.format=zcp_release", f"data.reference_path={mod}",
                  "data.reference_format=zcp_release", "data.reference_variant=modified", "data.limit=2")
    (ds,), issues = load_datasets(cfg.data)
    assert [it.answer for it in ds.originals] == ["0.079", "0.39"]
    assert [ds.reference[it.id][0].answer for it in ds.originals] == ["0.5", "1.5"] and not issues


def test_readme_fields_override_needs_no_plus(tmp_path):
    """Old conf: `data.fields={question: problem}` failed ('To append to your config use +data.fields')."""
    data = _write(tmp_path / "b.jsonl", [{"uid": "u1", "problem": "1+1?", "final": 2}])
    ref = _write(tmp_path / "r.jsonl", [{"original_id": "u1", "question": "1+2?", "answer": "3"}])
    cfg = compose("detect", f"data.path={data}", "data.format=jsonl",
                  "data.fields={question: problem, answer: final, id: uid}", f"data.reference_path={ref}")
    (ds,), _ = load_datasets(cfg.data)
    assert (ds.originals[0].id, ds.originals[0].question, ds.originals[0].answer) == ("u1", "1+1?", "2")
    cfg = compose("detect", f"data.path={data}", "data.format=jsonl", "data.fields.question=problem",
                  "data.fields.answer=final", "data.fields.id=uid", f"data.reference_path={ref}", "seed=3",
                  "data.sample=1")
    assert cfg.data.sample_seed == 3 and load_datasets(cfg.data)[0][0].originals[0].answer == "2"


def test_save_items_roundtrip(tmp_path):
    items = [Item("a::ref0", "q", "1", "sol", {"original_id": "a", "draw": 0})]
    save_items(tmp_path / "x.jsonl", items)
    back = load_items(tmp_path / "x.jsonl", unique_ids=False)
    assert back[0].metadata["original_id"] == "a" and back[0].solution == "sol" and back[0].metadata["draw"] == 0


# ------------------------------------------------------------------------------------------ fuzz

NUMBER = st.from_regex(r"-?(0|[1-9][0-9]{0,8})(\.[0-9]{1,5})?([eE][+-]?[0-9]{1,2})?", fullmatch=True)
TEXT = st.text(min_size=1, max_size=12).filter(lambda s: s.strip())


@st.composite
def jsonl_lines(draw):
    """Lines of a JSONL file and, per 1-based row, what the loader must make of it:
    ("ok", answer text) | ("field", None) (a row-level field error) | ("fatal", None) (the file is broken)."""
    lines, expect, ids = [], {}, []
    for k in range(draw(st.integers(1, 6))):
        row = k + 1
        kind = draw(st.sampled_from(["str", "num", "num", "missing", "wrong", "empty", "badid", "bytes", "notobj", "dup"]))
        if kind == "bytes":
            lines.append(draw(st.sampled_from([b"\xff", b"#"])) + draw(st.binary(max_size=20)).replace(b"\n", b" "))
            expect[row] = ("fatal", None)
            continue
        if kind == "notobj":
            lines.append(draw(st.sampled_from([b"[1, 2]", b'"text"', b"42", b"null"])))
            expect[row] = ("fatal", None)
            continue
        if kind == "dup" and ids:
            rid = draw(st.sampled_from(ids))
            expect[row] = ("fatal", None)
        else:
            rid = draw(st.sampled_from([f'"r{k}"', str(1000 + k)]))
            kind = "num" if kind == "dup" else kind
        if kind == "badid":
            rid, kind = draw(st.sampled_from(["[1]", "true", '{"a": 1}'])), "num"
            expect[row] = ("field", None)
        else:
            ids.append(rid)
        question = json.dumps(f"Q{row}: " + draw(TEXT))  # distinct: a repeated question is refused (test_duplicates)
        if kind == "str":
            text = draw(TEXT)
            answer, result = json.dumps(text, ensure_ascii=draw(st.booleans())), ("ok", text)
        elif kind == "num":
            text = draw(NUMBER)
            answer, result = text, ("ok", text)
        elif kind == "wrong":
            answer, result = draw(st.sampled_from(["[1]", '{"v": 1}', "true", "null"])), ("field", None)
        elif kind == "empty":
            answer, result = json.dumps(draw(st.sampled_from(["", " ", "\t\n"]))), ("field", None)
        else:
            answer, result = None, ("field", None)
        parts = [f'"id": {rid}', f'"question": {question}'] + ([f'"answer": {answer}'] if answer is not None else [])
        lines.append(("{" + ", ".join(draw(st.permutations(parts))) + "}").encode("utf-8"))
        expect.setdefault(row, result)
    return lines, expect


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jsonl_lines(), st.sampled_from(["error", "skip"]))
def test_fuzz_malformed_rows_never_alter_an_answer(tmp_path, case, on_invalid):
    lines, expect = case
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    bad = {r for r, (kind, _) in expect.items() if kind != "ok"}
    fatal = {r for r, (kind, _) in expect.items() if kind == "fatal"}
    skipped = []
    try:
        items = load_items(path, "jsonl", on_invalid=on_invalid, skipped=skipped)
    except ValueError as e:
        assert isinstance(e, DataError), repr(e)
        msg = _one_line(e)
        assert msg.startswith(f"file {path}"), msg
        if e.row is not None:
            assert f"row {e.row}" in msg and e.row in (bad if on_invalid == "error" else fatal | bad), (msg, expect)
        else:  # a file-level error: every row skipped, nothing usable
            assert on_invalid == "skip" and bad == set(expect), (msg, expect)
            assert msg.endswith(f"no usable rows ({len(bad)} skipped)"), msg
        assert bad, msg  # an error only when something is wrong
        return
    assert not fatal and (on_invalid == "skip" or not bad)
    assert [it.answer for it in items] == [text for r, (kind, text) in sorted(expect.items()) if kind == "ok"]
    assert sorted(s["row"] for s in skipped) == sorted(bad)
