"""run_baselines never reports from stale, partial or foreign inputs and never loses finished work.

Detection runs are hand-made directories (records.jsonl, run_meta.json, summary.json as zcp.probe.detect writes
them); the audited model is the shipped model's folder (its content fingerprint is what records are matched
against), but no model is loaded: `zcp.backends.registry.build_backend` is patched to a fake (the zcp_* detectors never
call the model; the likelihood ones get a text-scoring fake), or to raise where nothing may load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from configs import compose
from fakes import FakeBackend

from zcp.backends.base import ScoreRequest, ScoreResult
from zcp.benchmarks.loaders import save_items
from zcp.core.io import RunLock, model_fingerprint, read_jsonl, write_json, write_jsonl
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError, RunDirError
from zcp.simulate.base_model import base_model_path
from zcp.validate.baselines import FileData, JobInputs, baselines
from zcp.validate.detectors.base import (
    Detector,
    DetectorContext,
    DetectorSpec,
    get_detector,
    register_detector,
)

MODEL = str(base_model_path())


# ------------------------------------------------------------------------------------------ helpers
def _items(n: int, prefix: str, noun: str = "pens") -> list[Item]:
    return [Item(f"{prefix}{i}", f"{prefix.upper()} item {i}: Ann has {i + 2} {noun} and gets {i + 3} more.",
                 str(2 * i + 5)) for i in range(n)]


def _audited() -> str:
    """What the shipped model's backend fingerprint starts with (`zcp.backends.hf`)."""
    return f"{model_fingerprint(MODEL)}+None"


def _detection(d: Path, c: Sequence[Item], u: Sequence[Item], *, gap: bool = True, model: str | None = None,
               cut: int | None = None, summary: bool = True, m: int = 2, left_out: Sequence[str] = ()) -> Path:
    """A detection run dir as zcp.probe.detect leaves it: on C the original is right and its draws wrong (`gap`),
    on U nothing is right. `cut`: only the first rows (a killed run); `summary=False`: no summary.json."""
    recs = []
    for split, items in (("C", c), ("U", u)):
        for it in items:
            hit = gap and split == "C"
            recs.append({"id": it.id, "split": split, "variant": "original", "original_id": it.id, "draw": 0,
                         "prompt_hash": f"h{it.id}", "gold": it.answer, "correct": hit, "consistent": hit,
                         "p_first": 0.8 if hit else 0.3, "p_all": 0.7 if hit else 0.3})
            for j in range(m):
                recs.append({"id": f"{it.id}::ref{j}", "split": split, "variant": "reference", "original_id": it.id,
                             "draw": j, "prompt_hash": f"h{it.id}r{j}", "gold": str(j + 100), "correct": False,
                             "consistent": False, "p_first": 0.3, "p_all": 0.3})
    d.mkdir(parents=True, exist_ok=True)
    write_jsonl(d / "records.jsonl", recs[:cut] if cut else recs)
    write_json(d / "run_meta.json", {"fingerprint": "hand-made", "n_units": len(recs),
                                     "backend_fingerprint": f"{model or _audited()}|{{}}"})
    if summary:
        write_json(d / "summary.json", {"model": "hand-made", "metrics": ["acc", "con", "p_first", "p_all"],
                                        "skipped_rows": [{"file": "x", "id": i, "reason": "no reference row"}
                                                         for i in left_out]})
    return d / "records.jsonl"


def _compose(overrides: list[str]):
    return compose("baselines", f"model.path={MODEL}", "logger=none", *overrides)


def _files(tmp: Path, c: Sequence[Item], u: Sequence[Item]) -> list[str]:
    save_items(tmp / "c.jsonl", list(c))
    save_items(tmp / "u.jsonl", list(u))
    return [f"data.path={tmp / 'c.jsonl'}", f"data.u_path={tmp / 'u.jsonl'}"]


class TextFake(FakeBackend):
    """Scores raw text: log p 0.9 per character for memorised texts, less otherwise (ppl, zlib, ref work)."""

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        self._tick("score")
        out = []
        for r in requests:
            p = 0.9 if r.continuation in self.memorised else 0.1 + 0.001 * (len(r.continuation) % 7)
            n = len(r.continuation)
            out.append(ScoreResult(tuple(math.log(p) for _ in range(n)), token_means=(-1.0,) * n,
                                   token_stds=(1.0,) * n))
        return out


@pytest.fixture
def fake_models(monkeypatch):
    """build_backend returns text-scoring fakes (one per call, all counted in `calls`)."""
    made: list[TextFake] = []

    def build(cfg, progress=False):
        b = TextFake({})
        made.append(b)
        return b

    monkeypatch.setattr("zcp.backends.registry.build_backend", build)
    return made


@pytest.fixture
def no_models(monkeypatch):
    """Any attempt to load a model fails the test."""
    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("zcp.backends.registry.build_backend", refuse)
    monkeypatch.setattr("zcp.backends.registry.build_backend", refuse)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


def _run(overrides):
    from zcp.validate.baselines import run_baselines

    return run_baselines(_compose(overrides))


# ------------------------------------------------------------------------------------------ wrong results
def test_resume_after_a_newer_detection_recomputes_the_zcp_blocks(tmp_path, fake_models):
    """The old AUROC must not stay beside a decision from the new records: the zcp_* blocks are recomputed
    when the detection records they were made from change (their content hash is part of the block)."""
    c, u = _items(12, "c"), _items(12, "u", "cups")
    files = _files(tmp_path, c, u)
    old = _detection(tmp_path / "det_old", c, u, gap=True)
    new = _detection(tmp_path / "det_new", c, u, gap=False)
    out = tmp_path / "out"
    s1 = _run([*files, "detectors=[zcp_acc]", f"zcp_records={old}", f"output_dir={out}"])
    assert s1["detectors"]["zcp_acc"]["auroc"] == 1.0
    s2 = _run([*files, "detectors=[zcp_acc]", f"zcp_records={new}", f"output_dir={out}"])
    fresh = _run([*files, "detectors=[zcp_acc]", f"zcp_records={new}", f"output_dir={tmp_path / 'fresh'}"])
    e, f = s2["detectors"]["zcp_acc"], fresh["detectors"]["zcp_acc"]
    assert e["auroc"] == f["auroc"] == 0.5
    assert e["files"]["data"]["decision"] is False and e["files"] == f["files"]
    rows = list(read_jsonl(out / "records.jsonl"))
    assert len(rows) == 24 and all(r["score"] == 0.0 for r in rows)  # the old gaps (1.0 on C) are gone


def test_an_unfinished_detection_is_refused_by_name_before_any_model_loads(tmp_path, no_models):
    """Records cut at half, no summary.json: one line naming the dir and what is missing; nothing written."""
    c, u = _items(12, "c"), _items(12, "u", "cups")
    files = _files(tmp_path, c, u)
    cut = _detection(tmp_path / "det_cut", c, u, cut=40, summary=False)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as e:
        _run([*files, "detectors=[zcp_acc,ppl]", f"zcp_records={cut}", f"output_dir={out}"])
    msg = str(e.value)
    assert "det_cut" in msg and "not finished" in msg and "no summary.json" in msg and "40 of the 72 units" in msg
    assert "\n" not in msg and not out.exists()


def test_the_default_detector_list_skips_zcp_on_an_unfinished_run_detection(tmp_path):
    """A run dir whose detection is unfinished: with the default list the zcp_* detectors are skipped with the
    reason (the others run); a zcp_* detector the user named is an error."""
    from zcp.core.rundir import ContaminationRun
    from zcp.validate.baselines import DEFAULT_DETECTORS, check_detection_records

    c, u = _items(4, "c"), _items(4, "u", "cups")
    run = tmp_path / "run"
    _detection(run / "detect" / "FT__a", c, u, cut=10)
    found, passed = ContaminationRun(run).newest_detection()
    assert found is None and "FT__a is not finished" in passed[0]

    def inputs():
        return JobInputs({"data": FileData("data", "C", c), "u": FileData("u", "U", u)}, MODEL, None, None, None,
                         "run", detection_note=passed[0])

    dets = [get_detector(n) for n in DEFAULT_DETECTORS]
    inp = inputs()
    assert check_detection_records(inp, dets, explicit=False, audited=_audited(), run=run) is None
    assert set(inp.skip) == {"zcp_acc", "zcp_con", "zcp_p_first", "zcp_p_all"}
    assert "FT__a is not finished" in inp.skip["zcp_acc"]
    s = baselines(TextFake({}), [get_detector(n) for n in ("zcp_acc", "test_integrity_len")], inp, tmp_path / "b",
                  DetectorContext(), "fp")
    assert "not finished" in s["detectors"]["zcp_acc"]["skipped"]
    assert s["detectors"]["test_integrity_len"]["auroc"] is not None
    with pytest.raises(ConfigError, match="FT__a is not finished"):
        check_detection_records(inputs(), [get_detector("zcp_acc")], explicit=True, audited=_audited(), run=run)


def test_u_sharing_ids_or_all_questions_with_c_is_refused(tmp_path, no_models):
    c = _items(30, "c")
    clash = [Item(it.id, f"another question {k}", "1") for k, it in enumerate(c[:25])] + _items(5, "u", "cups")
    for name, u, key in (("u_is_c", c, "shares 30 of its 30 item id"), ("clash", clash, "shares 25 of its 30 item id")):
        d = tmp_path / name
        d.mkdir()
        out = d / "out"
        with pytest.raises(DataError, match=key) as e:
            _run([*_files(d, c, u), "detectors=[ppl]", f"output_dir={out}"])
        assert "u.jsonl" in str(e.value) and not out.exists()
    # the same questions under other ids, merged (data.on_duplicate=merge keeps C's copy): no U is left
    d = tmp_path / "same_questions"
    d.mkdir()
    renamed = [Item(f"x{k}", it.question, it.answer) for k, it in enumerate(c)]
    with pytest.raises(DataError, match="no item of U is left"):
        _run([*_files(d, c, renamed), "detectors=[ppl]", "data.on_duplicate=merge", f"output_dir={d / 'out'}"])


@register_detector(DetectorSpec("test_integrity_len", "Question length (integrity test)", "score", frozenset(),
                                "test"))
class _Length(Detector):
    """Score = the question's length (C items are written longer than U items)."""

    def score_items(self, backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict]:
        backend._tick("score")
        return [{"id": it.id, "score": float(len(it.question))} for it in items]


@register_detector(DetectorSpec("test_integrity_digits", "Digit count (integrity test)", "score", frozenset(),
                                "test"))
class _Digits(Detector):
    """Score = the number of digits in the question."""

    def score_items(self, backend, items: Sequence[Item], ctx: DetectorContext) -> list[dict]:
        backend._tick("score")
        return [{"id": it.id, "score": float(sum(ch.isdigit() for ch in it.question))} for it in items]


def _length_job(n_c: int, n_u: int) -> JobInputs:
    c = [Item(f"c{i}", "long question " * 3 + str(i), "1") for i in range(n_c)]
    u = [Item(f"u{i}", f"short {i}", "1") for i in range(n_u)]
    return JobInputs({"data": FileData("data", "C", c), "u": FileData("u", "U", u)}, "m", None, None, None, "t")


def test_auroc_and_tpr_from_too_few_items_are_flagged(tmp_path):
    """A 1-item U gives AUROC 1.0 and TPR 1.0: kept, but flagged in summary.json and marked in baselines.md."""
    s = baselines(TextFake({}), [get_detector("test_integrity_len")], _length_job(1, 1), tmp_path / "one",
                  DetectorContext(), "fp")
    e = s["detectors"]["test_integrity_len"]
    assert e["auroc"] == 1.0 and e["tpr_at_5fpr"] == 1.0
    assert any("1 C and 1 U" in w for w in e["warnings"]) and any("TPR@5%FPR from 1 U" in w for w in e["warnings"])
    table = (tmp_path / "one" / "baselines.md").read_text()
    assert "1.000 †" in table and "fewer than 10 on a side" in table and "cannot resolve a 5%" in table
    mid = baselines(TextFake({}), [get_detector("test_integrity_len")], _length_job(12, 12), tmp_path / "mid",
                    DetectorContext(), "fp")["detectors"]["test_integrity_len"]["warnings"]
    assert len(mid) == 1 and mid[0].startswith("TPR@5%FPR from 12 U items")
    big = baselines(TextFake({}), [get_detector("test_integrity_len")], _length_job(25, 25), tmp_path / "big",
                    DetectorContext(), "fp")
    assert big["detectors"]["test_integrity_len"]["warnings"] == []
    assert "†" not in (tmp_path / "big" / "baselines.md").read_text()


def test_records_of_another_model_or_split_are_refused(tmp_path, no_models):
    c, u = _items(12, "c"), _items(12, "u", "cups")
    files = _files(tmp_path, c, u)
    other = _detection(tmp_path / "det_other_model", c, u, model="0123456789abcdef+None")
    with pytest.raises(ConfigError, match=r"det_other_model probed another model \(hand-made\)") as e:
        _run([*files, "detectors=[zcp_acc]", f"zcp_records={other}", f"output_dir={tmp_path / 'o1'}"])
    assert "\n" not in str(e.value)
    c_only = _detection(tmp_path / "det_c_only", c, [])
    with pytest.raises(ConfigError, match=r"12 of the 12 items of U .* not among its originals, first 'u0'"):
        _run([*files, "detectors=[zcp_acc]", f"zcp_records={c_only}", f"output_dir={tmp_path / 'o2'}"])
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_items_a_detection_left_out_on_purpose_stay_unscored(tmp_path, fake_models):
    """An item the detection listed as left out (no reference row) is not a sign of foreign records."""
    c, u = _items(12, "c"), _items(12, "u", "cups")
    rec = _detection(tmp_path / "det", c[1:], u, left_out=["c0"])
    s = _run([*_files(tmp_path, c, u), "detectors=[zcp_acc]", f"zcp_records={rec}", f"output_dir={tmp_path / 'o'}"])
    assert s["detectors"]["zcp_acc"]["files"]["data"]["n_unscored"] == 1


def test_the_model_of_a_detection_is_read_from_its_meta_else_its_config(tmp_path):
    from zcp.validate.baselines import detection_model

    d = tmp_path / "det"
    _detection(d, _items(2, "c"), _items(2, "u"))
    assert detection_model(d) == _audited()
    write_json(d / "run_meta.json", {"fingerprint": "old", "n_units": 12})  # made before the fingerprint was kept
    assert detection_model(d) is None
    (d / "config.yaml").write_text(f"model:\n  path: {MODEL}\n  adapter: null\n")
    assert detection_model(d) == _audited()


# ------------------------------------------------------------------------------------------ lost work
def test_a_rerun_with_fewer_detectors_keeps_the_others_finished_work(tmp_path):
    out = tmp_path / "out"
    inputs = _length_job(12, 12)
    both = [get_detector("test_integrity_len"), get_detector("test_integrity_digits")]
    full = baselines(TextFake({}), both, inputs, out, DetectorContext(), "fp")
    rows = (out / "records.jsonl").read_text()
    fb = TextFake({})
    sub = baselines(fb, [get_detector("test_integrity_len")], inputs, out, DetectorContext(), "fp")
    assert fb.calls["score"] == 0 and (out / "records.jsonl").read_text() == rows  # nothing redone, nothing lost
    kept = sub["detectors"]["test_integrity_digits"]
    assert kept["requested"] is False and sub["detectors"]["test_integrity_len"]["requested"] is True
    assert kept["auroc"] == full["detectors"]["test_integrity_digits"]["auroc"]
    assert list(sub["detectors"]) == ["test_integrity_len", "test_integrity_digits"]  # the requested first
    assert "Digit count (integrity test) (earlier run)" in (out / "baselines.md").read_text()
    fb = TextFake({})
    baselines(fb, [get_detector("test_integrity_digits")], inputs, out, DetectorContext(), "fp")
    assert fb.calls["score"] == 0 and (out / "records.jsonl").read_text() == rows


def test_rows_of_a_detector_without_an_earlier_summary_are_named_and_kept(tmp_path):
    out = tmp_path / "out"
    inputs = _length_job(12, 12)
    baselines(TextFake({}), [get_detector("test_integrity_digits")], inputs, out, DetectorContext(), "fp")
    (out / "summary.json").unlink()
    rows = (out / "records.jsonl").read_text()
    s = baselines(TextFake({}), [get_detector("test_integrity_len")], inputs, out, DetectorContext(), "fp")
    assert "test_integrity_digits" not in s["detectors"]
    assert s["other_detectors"]["test_integrity_digits"]["rows"] == 24
    assert (out / "records.jsonl").read_text().startswith(rows)
    assert "test_integrity_digits (24 rows)" in (out / "baselines.md").read_text()


# ------------------------------------------------------------------------------------------ unclear
def test_a_subset_of_the_same_run_is_accepted(tmp_path, fake_models):
    """A dir made with [ppl, ref] (the reference model in play) takes a rerun with [ppl]: the same run."""
    c, u = _items(6, "c"), _items(6, "u", "cups")
    files = _files(tmp_path, c, u)
    out = tmp_path / "out"
    first = _run([*files, "detectors=[ppl,ref]", f"ref_model.path={MODEL}", f"output_dir={out}"])
    assert first["detectors"]["ref"]["skipped"] is None
    n = len((out / "records.jsonl").read_text().splitlines())
    again = _run([*files, "detectors=[ppl]", f"output_dir={out}"])
    assert fake_models[-1].calls["score"] == 0 and len((out / "records.jsonl").read_text().splitlines()) == n
    assert again["detectors"]["ppl"]["auroc"] == first["detectors"]["ppl"]["auroc"]


def test_another_reference_model_refuses_the_ref_blocks(tmp_path):
    inputs = _length_job(3, 3)
    inputs.ref_path = "base-A"
    out = tmp_path / "out"
    ctx = DetectorContext(ref_backend=TextFake({}))
    baselines(TextFake({}), [get_detector("ref")], inputs, out, ctx, "fp")
    inputs.ref_path = "base-B"
    with pytest.raises(RunDirError, match="another reference model"):
        baselines(TextFake({}), [get_detector("ref")], inputs, out, ctx, "fp")


def test_a_concurrent_run_refuses_before_loading_a_model(tmp_path, no_models):
    c, u = _items(4, "c"), _items(4, "u", "cups")
    out = tmp_path / "out"
    with RunLock(out), pytest.raises(RunDirError, match="in use by another run"):
        _run([*_files(tmp_path, c, u), "detectors=[ppl]", f"output_dir={out}"])


def test_a_model_that_fails_to_load_leaves_no_directory(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise ConfigError("model.path=x: no weights there")

    monkeypatch.setattr("zcp.backends.registry.build_backend", broken)
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="no weights"):
        _run([*_files(tmp_path, _items(4, "c"), _items(4, "u", "cups")), "detectors=[ppl]", f"output_dir={out}"])
    assert not out.exists()


def test_a_directory_of_the_previous_format_is_refused_in_one_line(tmp_path, fake_models):
    """A directory whose fingerprint lives in run_meta.json (no run_fingerprint.json: made by an earlier zcp) is
    neither taken over nor translated: the run is refused in one line naming its fingerprint and what to do,
    before any model loads, and nothing there changes."""
    c, u = _items(4, "c"), _items(4, "u", "cups")
    files = _files(tmp_path, c, u)
    out = tmp_path / "out"
    _run([*files, "detectors=[ppl,ref]", f"ref_model.path={MODEL}", f"output_dir={out}"])
    (out / "run_fingerprint.json").unlink()
    write_json(out / "run_meta.json", {"fingerprint": "0" * 32})
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    n_models = len(fake_models)
    with pytest.raises(RunDirError, match=r"holds records\.jsonl but no run_fingerprint\.json \(a run of unknown "
                                          r"configuration; this baselines run: fingerprint [0-9a-f]{16}\); use another "
                                          r"output_dir, or delete .* to rebuild it") as e:
        _run([*files, "detectors=[ppl,ref]", f"ref_model.path={MODEL}", f"output_dir={out}"])
    assert "\n" not in str(e.value) and len(fake_models) == n_models
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"} == before
