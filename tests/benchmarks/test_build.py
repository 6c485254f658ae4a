"""Dataset build entry: Hydra composition, files, split, reference sets per method, paraphrases, report, privacy."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

import pytest
from configs import compose

import zcp.config  # noqa: F401  (registers the ${zcp.asset:...} resolver)
from zcp.benchmarks.build import build_data
from zcp.benchmarks.paraphrase import numeric_values
from zcp.benchmarks.split import Manifest
from zcp.core.io import read_jsonl, sha256_file
from zcp.errors import DataError


class RecordingTracker:
    """Stands in for zcp.core.tracking.Tracker and records what would go to W&B."""

    calls: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, cfg: Any, **kw: Any) -> None:
        RecordingTracker.calls = []

    def log(self, data: Any, step: int | None = None) -> None:
        self.calls.append(("log", dict(data)))

    def summary(self, data: Any) -> None:
        self.calls.append(("summary", dict(data)))

    def table(self, key: str, rows: list) -> None:
        self.calls.append(("table", key))

    def artifact(self, name: str, type_: str, paths: list[str]) -> None:  # pragma: no cover - unused
        self.calls.append(("artifact", name))

    def finish(self) -> None:
        pass

    def __enter__(self) -> RecordingTracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


@pytest.fixture
def recording_tracker(monkeypatch):
    import zcp.core.tracking

    monkeypatch.setattr(zcp.core.tracking, "Tracker", RecordingTracker)
    return RecordingTracker


def test_gsm8k_build_writes_consistent_files_and_report(shared_data, tmp_path, recording_tracker):
    src = shared_data / "gsm8k" / "test.jsonl"
    cfg = compose("build_data", "data=gsm8k", f"data.path={src}", "data.limit=16", "reference.m=2",
                  "paraphrase.k=3", f"output_dir={tmp_path}")
    report = build_data(cfg)
    assert json.loads((tmp_path / "build_report.json").read_text()) == json.loads(json.dumps(report, default=str))
    items = list(read_jsonl(tmp_path / "items.jsonl"))
    ids = [r["id"] for r in items]
    assert ids == [f"gsm8k_test-{i:05d}" for i in range(16)]  # the split in the id (the file stem)
    manifest = Manifest.load(tmp_path / "manifest.json")
    assert sorted(manifest.c_ids + manifest.u_ids) == sorted(ids) and len(manifest.c_ids) == 8
    assert manifest.source_sha256 == sha256_file(src) == report["data"]["sha256"]

    refs = list(read_jsonl(tmp_path / "reference.jsonl"))
    per_item: dict[str, int] = {}
    for r in refs:
        assert r["original_id"] in ids and r["id"].startswith(r["original_id"] + "::ref")
        per_item[r["original_id"]] = per_item.get(r["original_id"], 0) + 1
    assert max(per_item.values()) <= 2
    short = {r["id"] for r in report["reference"]["rejections"]}
    assert short == {i for i in ids if per_item.get(i, 0) < 2}  # every shortfall is listed with a reason
    assert all(r["reason"] for r in report["reference"]["rejections"])
    assert report["reference"]["method"] == "gsm8k"
    shift = report["reference"]["shift"]  # the difficulty shift of the answers: exact references keep digits
    assert shift["pairs"] == len(refs) and shift["longer"] == shift["shorter"] == 0.0
    assert {"larger", "smaller", "mean_digits", "mean_log10_abs", "leading_digit", "warnings"} <= set(shift)
    assert report["reference"]["coverage"] == pytest.approx(len(per_item) / 16)
    assert report["counts"]["reference_items"] == len(refs)

    paras = list(read_jsonl(tmp_path / "paraphrases.jsonl"))
    originals = {r["id"]: r for r in items}
    assert {p["original_id"] for p in paras} <= set(manifest.c_ids)  # only Dataset C is paraphrased
    for p in paras:
        o = originals[p["original_id"]]
        assert numeric_values(p["question"]) == numeric_values(o["question"]) and p["answer"] == o["answer"]
        assert 0 <= p["metadata"]["rougeL"] <= 1
    assert report["counts"]["paraphrases"] == len(paras)
    assert report["files"]["reference.jsonl"] == sha256_file(tmp_path / "reference.jsonl")
    assert report["seed"] == 0 and (tmp_path / "config.yaml").exists()

    # W&B gets counts only: no reference table unless asked for
    assert ("table", "reference") not in recording_tracker.calls
    logged = {k for kind, d in recording_tracker.calls if kind == "log" for k in d}
    assert "counts/reference_items" in logged and "reference/coverage" in logged


def test_reference_table_goes_to_wandb_only_when_opted_in(shared_data, tmp_path, recording_tracker):
    cfg = compose("build_data", "data=gsm8k", f"data.path={shared_data / 'gsm8k' / 'test.jsonl'}",
                  "data.limit=4", "paraphrase=none", "log_reference_to_wandb=true", f"output_dir={tmp_path}")
    build_data(cfg)
    assert ("table", "reference") in recording_tracker.calls


def test_same_seed_same_build(shared_data, tmp_path):
    outs = []
    for name in ("a", "b"):
        cfg = compose("build_data", "data=gsm8k", f"data.path={shared_data / 'gsm8k' / 'test.jsonl'}",
                      "data.limit=6", "paraphrase.k=2", "logger=none", f"output_dir={tmp_path / name}")
        outs.append(build_data(cfg)["files"])
    assert outs[0] == outs[1]


def test_generated_word_problems_use_their_programs_and_templates(tmp_path):
    from zcp.benchmarks.wordproblems import execute

    cfg = compose("build_data", "data=jsonl", "data.name=wp", "data.format=wordproblems", "data.path=null",
                  "+data.n=12", "reference.m=2", "paraphrase=template", "paraphrase.k=2", "logger=none",
                  f"output_dir={tmp_path}")
    report = build_data(cfg)
    assert report["reference"]["method"] == "wordproblem" and report["reference"]["coverage"] == 1.0
    items = {r["id"]: r for r in read_jsonl(tmp_path / "items.jsonl")}
    from zcp.core.items import Item

    for r in read_jsonl(tmp_path / "reference.jsonl"):
        ref = Item.from_dict(r)
        assert str(execute(ref)) == ref.answer != items[r["original_id"]]["answer"]  # re-executed, changed
        assert ref.metadata["family"] == items[r["original_id"]]["metadata"]["family"]
    paras = list(read_jsonl(tmp_path / "paraphrases.jsonl"))
    assert all(p["metadata"]["paraphraser"] == "template" for p in paras)
    short = {r["original_id"] for r in report["paraphrase"]["rejections"] if r["round"] is None}
    for c in Manifest.load(tmp_path / "manifest.json").c_ids:  # k variants, or the shortfall is reported
        assert sum(p["original_id"] == c for p in paras) == 2 or c in short


def test_arithmark_reference(tmp_path):
    from zcp.benchmarks.arithmark import evaluate_expression, parse_expression

    cfg = compose("build_data", "data=jsonl", "data.name=arithmark", "data.format=arithmark",
                  "data.path=null", "+data.n_per_stage=3", "paraphrase=none", "logger=none",
                  f"output_dir={tmp_path}")
    report = build_data(cfg)
    assert report["reference"]["method"] == "arithmark" and report["counts"]["items"] == 15
    items = {r["id"]: r for r in read_jsonl(tmp_path / "items.jsonl")}
    for r in read_jsonl(tmp_path / "reference.jsonl"):
        meta, orig = r["metadata"], items[r["original_id"]]["metadata"]
        ops, operators = parse_expression(meta["expression"])
        assert evaluate_expression(ops, operators) == meta["answer"] != orig["answer"]
        assert meta["stage"] == orig["stage"] and operators == parse_expression(orig["expression"])[1]


class _Scripted:
    """Generator: one fixed proposal for "Compute 12 + 30.", prose otherwise. Judge: sums the numbers."""

    supports_prefill, supports_logprobs = True, False

    def __init__(self, name: str) -> None:
        self.name = name

    def generate(self, requests: list) -> list[str]:
        out = []
        for r in requests:
            if self.name == "gen":
                ok = "Compute 12 + 30." in r.prompt.user
                out.append("<problem>Compute 15 + 31.</problem><answer>46</answer>" if ok else "I cannot.")
            else:
                problem = r.prompt.user.split("\n\nPlease reason")[0]
                out.append(f"\\boxed{{{sum(int(x) for x in re.findall(r'[0-9]+', problem))}}}")
        return out


def test_llm_reference_through_build_data(tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"id": "a", "question": "Compute 12 + 30.", "answer": "42"}) + "\n"
                    + json.dumps({"id": "c", "question": "Find the value of $x$.", "answer": "3"}) + "\n")
    cfg = compose("build_data", "data=jsonl", "data.name=math", f"data.path={data}", "data.format=items",
                  "reference=llm", "reference.pipeline.n_attempts=2", "paraphrase=none", "logger=none",
                  f"output_dir={tmp_path / 'o'}")
    backends = {"generator": _Scripted("gen"), "judges": [_Scripted("judge")]}
    report = build_data(cfg, backends=backends)
    assert report["reference"]["method"] == "llm"
    assert [r["id"] for r in read_jsonl(tmp_path / "o" / "reference.jsonl")] == ["a::ref0"]
    verdicts = list(read_jsonl(tmp_path / "o" / "reference_verdicts.jsonl"))
    assert {v["original_id"] for v in verdicts} == {"a", "c"}
    assert [r["id"] for r in report["reference"]["rejections"]] == ["c"]


def test_llm_reference_without_models_fails_clearly(tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"id": "a", "question": "Compute 12 + 30.", "answer": "42"}) + "\n")
    cfg = compose("build_data", "data=jsonl", "data.name=math", f"data.path={data}", "data.format=items",
                  "paraphrase=none", "logger=none", f"output_dir={tmp_path / 'o'}")
    with pytest.raises(ValueError, match=r"reference\.generator\.path"):
        build_data(cfg)


def test_bad_rows_are_reported_or_fail_with_file_and_row(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"question": "Ann has 3 apples and buys 4. How many?",
                                "answer": "3+4=<<3+4=7>>7\n#### 7"}) + "\n"
                    + json.dumps({"question": "No marker?", "answer": "7"}) + "\n")
    base = ["data=gsm8k", f"data.path={data}", "paraphrase=none", "logger=none"]
    report = build_data(compose("build_data", *base, "data.on_invalid=skip", f"output_dir={tmp_path / 'a'}"))
    assert report["counts"]["items"] == 1 and report["skipped_rows"][0]["row"] == 2
    with pytest.raises(DataError, match=r"row 2.*answer"):
        build_data(compose("build_data", *base, f"output_dir={tmp_path / 'b'}"))


# ------------------------------------------------------------------------------------ difficulty shift


def test_answer_shift_fields_and_warnings_on_a_biased_toy_reference():
    from zcp.benchmarks.build import answer_shift
    from zcp.core.items import Item

    items = [Item(f"t{i}", f"q{i}", str(a)) for i, a in enumerate([12, 45, 7, 300, 86, 2])]
    biased = [Item(f"t{i}::ref0", "q", str(int(it.answer) * 10), metadata={"original_id": it.id})
              for i, it in enumerate(items)]
    shift = answer_shift(items, biased)
    assert shift["pairs"] == 6 and shift["larger"] == 1.0 and shift["smaller"] == 0.0
    assert shift["longer"] == 1.0 and shift["shorter"] == 0.0 and shift["same_digits"] == 0.0
    assert shift["mean_digits"] == {"original": pytest.approx(11 / 6, abs=1e-4), "reference": pytest.approx(17 / 6, abs=1e-4)}
    assert shift["mean_log10_abs"]["reference"] == pytest.approx(shift["mean_log10_abs"]["original"] + 1, abs=1e-3)
    lead = shift["leading_digit"]
    assert lead["original"] == lead["reference"] and lead["total_variation"] == 0  # x10 keeps the first digit
    assert len(shift["warnings"]) == 2 and "longer" in shift["warnings"][0] and "larger" in shift["warnings"][1]

    # a balanced reference (one up, one down per original, same digits) raises nothing
    fair = [Item(f"{it.id}::ref{j}", "q", str(int(it.answer) + d), metadata={"original_id": it.id})
            for it in items[:5] for j, d in enumerate((1, -1))]
    shift = answer_shift(items, fair)
    assert shift["larger"] == shift["smaller"] == 0.5 and shift["longer"] == shift["shorter"] == 0.0
    assert shift["warnings"] == [] and shift["digit_shift"] == 0 and shift["size_shift"] == 0
    # the thresholds are parameters; non-numeric answers are counted, not compared
    odd = [*fair[:3], Item("t0::ref9", "q", "\\sqrt{2}", metadata={"original_id": "t0"})]
    shift = answer_shift(items, odd, max_digit_shift=0.0, max_size_shift=0.2)
    assert shift["unparsed"] == 1 and shift["pairs"] == 3 and len(shift["warnings"]) == 1
    assert shift["thresholds"] == {"max_digit_shift": 0.0, "max_size_shift": 0.2}


def test_numeric_answers_and_leading_digits():
    from fractions import Fraction

    from zcp.benchmarks.build import _leading_digit, numeric_answer

    assert [numeric_answer(x) for x in ("18", "-4.2317", "$1,250", "35%", "3/4", "\\frac{1}{2}", "x+1", "")] == \
        [18, Fraction("-4.2317"), 1250, 35, Fraction(3, 4), Fraction(1, 2), None, None]
    assert [_leading_digit(x) for x in ("-40", "0.3333", "1,250", "abc")] == ["4", "0", "1", None]


class _Inflating:
    """Generator: the same problem with every number times 10. Judge: sums the numbers (so it agrees)."""

    supports_prefill, supports_logprobs = True, False

    def __init__(self, name: str) -> None:
        self.name = name

    def generate(self, requests: list) -> list[str]:
        out = []
        for r in requests:
            if self.name == "gen":
                problem = re.search(r"Compute [^.]*\.", r.prompt.user).group(0)
                big = re.sub(r"\d+", lambda m: str(int(m.group(0)) * 10), problem)
                out.append(f"<problem>{big}</problem><answer>{sum(int(x) for x in re.findall(r'[0-9]+', big))}</answer>")
            else:
                problem = r.prompt.user.split("\n\nPlease reason")[0]
                out.append(f"\\boxed{{{sum(int(x) for x in re.findall(r'[0-9]+', problem))}}}")
        return out


def test_build_report_warns_when_the_reference_set_is_harder(tmp_path, caplog):
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"id": f"a{i}", "question": f"Compute {i + 3} + {2 * i + 5}.",
                                        "answer": str(3 * i + 8)}) + "\n" for i in range(4)))
    base = ["data=jsonl", "data.name=math", f"data.path={data}", "data.format=items", "reference=llm",
            "paraphrase=none", "logger=none"]
    backends = {"generator": _Inflating("gen"), "judges": [_Inflating("judge")]}
    with caplog.at_level("WARNING", logger="zcp.benchmarks.build"):
        report = build_data(compose("build_data", *base, f"output_dir={tmp_path / 'o'}"), backends=backends)
    shift = report["reference"]["shift"]
    assert shift["pairs"] == 4 and shift["larger"] == 1.0 and shift["longer"] == 1.0
    assert len(shift["warnings"]) == 2 and len(report["warnings"]) == 2
    assert json.loads((tmp_path / "o" / "build_report.json").read_text())["warnings"] == report["warnings"]
    assert sum("WARNING reference set" in r.getMessage() for r in caplog.records) == 2
    # thresholds come from the config
    report = build_data(compose("build_data", *base, f"output_dir={tmp_path / 'p'}",
                                "reference_shift.max_digit_shift=1.0", "reference_shift.max_size_shift=1.0"),
                        backends=backends)
    assert report["warnings"] == [] and report["reference"]["shift"]["larger"] == 1.0


def test_exact_references_report_their_law_and_exchangeability(tmp_path):
    """Generated word problems get exact draws: the report names the law, checks every feature statistically
    (no warning) and keeps the difficulty shares as a description only."""
    cfg = compose("build_data", "data=jsonl", "data.name=wp", "data.format=wordproblems", "data.path=null",
                  "+data.n=30", "reference.m=2", "paraphrase=none", "logger=none", f"output_dir={tmp_path}")
    report = build_data(cfg)
    ref = report["reference"]
    assert ref["method"] == "wordproblem" and ref["law"] == "exact"
    shift = ref["shift"]
    assert shift["pairs"] == 60 and shift["warnings"] == [] and shift["thresholds_applied"] is False
    assert set(shift["leading_digit"]["original"]) == {str(d) for d in range(10)}
    ex = ref["exchangeability"]
    assert ex["items"] == 30 and ex["min_p_bonferroni"] >= 0.01 and ex["warnings"] == []
    assert {"answer_leads_1_or_2", "answer_special_0_1_10_100_1000", "question_has_equal_numbers"} <= set(ex["features"])
    assert report["warnings"] == []
