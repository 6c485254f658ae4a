"""The control benchmark in the detect job: loading and checks, records and resume, the two-sample verdict."""

import json
import math

import pytest
from configs import compose
from fakes import FakeBackend
from omegaconf import OmegaConf

from zcp.backends.base import ScoreResult
from zcp.benchmarks.loaders import save_items
from zcp.config import validate
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError
from zcp.probe.control import CONTROL, compare_with_control, control_markdown
from zcp.probe.datasets import load_datasets
from zcp.probe.detect import DetectDataset, DetectSettings, detect
from zcp.probe.prompts import ProbeConfig


def _set(split, tag, n, m=2):
    """Items whose original answer is round (a multiple of 10) while their reference draws' are not: the shape
    mismatch a reference builder can leave between originals and draws."""
    items = [Item(f"{tag}{k}", f"{tag} item {k}: how many?", str(10 * (k + 1))) for k in range(n)]
    ref = {it.id: [Item(f"{it.id}::r{j}", f"{tag} item {k} variant {j}: how many?", str(10 * (k + 1) + j + 3),
                        metadata={"original_id": it.id}) for j in range(m)] for k, it in enumerate(items)}
    return DetectDataset(split, items, ref)


class ShapePrior(FakeBackend):
    """A model with a prior for round answers (p 0.3 vs 0.1 per token), and, for `memorised` questions, p 0.8."""

    def score(self, requests):
        self._tick("score")
        out = []
        for r in requests:
            answer = r.continuation.rstrip("}")
            p = 0.8 if r.prompt.user in self.memorised else (0.3 if answer.endswith("0") else 0.1)
            out.append(ScoreResult(tuple(math.log(p) for _ in r.continuation)))
        return out


SETTINGS = {"bootstrap_samples": 999, "progress": False}
PROBE = ProbeConfig(metrics=("p_first", "p_all"))


def test_builder_bias_cancels_against_the_control(tmp_path):
    audited, control = _set("D", "a", 24), _set(CONTROL, "c", 20)
    s = detect(ShapePrior({}), [audited, control], PROBE, tmp_path, DetectSettings(**SETTINGS))
    within = {v["split"]: v for v in s["verdicts"]}
    assert within["D"]["contaminated"] and within[CONTROL]["contaminated"]  # the shape prior alone fires it
    block = s["control"]
    assert [(r["split"], r["metric"]) for r in block["results"]] == [("D", "p_first"), ("D", "p_all")]
    assert all(r["n"] == 24 and r["n_control"] == 20 for r in block["results"])
    assert all(r["diff"] == pytest.approx(0.0, abs=1e-12) and r["p_value"] == 1.0 for r in block["results"])
    assert block["verdicts"] == [{**block["verdicts"][0], "split": "D", "variant": "original", "contaminated": False}]
    table = (tmp_path / "table.md").read_text()
    assert "## Against the control set" in table and "| D | original | P_first | 24 | 20 |" in table
    assert json.loads((tmp_path / "summary.json").read_text())["control"] == block


def test_a_leak_stands_out_against_the_control(tmp_path):
    audited, control = _set("D", "a", 24), _set(CONTROL, "c", 20)
    leaked = {it.question: it.answer for it in audited.originals[:12]}
    s = detect(ShapePrior(leaked), [audited, control], PROBE, tmp_path, DetectSettings(**SETTINGS))
    (verdict,) = s["control"]["verdicts"]
    assert verdict["contaminated"] and verdict["p_value"] < 0.01 and verdict["c_cont"] > 0.9
    assert all(r["gap"] > r["gap_control"] for r in s["control"]["results"])


def test_control_records_resume(tmp_path):
    audited, control = _set("D", "a", 6), _set(CONTROL, "c", 5)
    settings = DetectSettings(**SETTINGS, chunk_size=4)
    with pytest.raises(KeyboardInterrupt):
        detect(ShapePrior({}, fail_after=3), [audited, control], PROBE, tmp_path / "run", settings)
    partial = (tmp_path / "run" / "records.jsonl").read_text().splitlines()
    backend = ShapePrior({})
    s = detect(backend, [audited, control], PROBE, tmp_path / "run", settings)
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 6 * 3 + 5 * 3 and recs[: len(partial)] == [json.loads(x) for x in partial]
    assert backend.calls["score"] == math.ceil((len(recs) - len(partial)) / 4)  # only what was missing
    assert {r["split"] for r in recs[-15:]} == {CONTROL}
    once = detect(ShapePrior({}), [audited, control], PROBE, tmp_path / "once", settings)
    assert s["control"] == once["control"]


def test_compare_with_control_is_exact_for_tiny_sets_and_pools_seeds():
    audited = {("D", "original"): {"p_all": {"a": 0.5, "b": 0.4, "c": 0.3}}}
    control = {"p_all": {"x": 0.0, "y": 0.1}}
    tiny = compare_with_control(audited, control, ["p_all"], seeds=[0, 1], B=100, alpha=0.05)
    (r,) = tiny["results"]
    assert r["exact"] and r["n_relabellings"] == 10 and r["p_value"] == pytest.approx(0.1)  # 1 of C(5, 2)
    big_a = {("D", "original"): {"p_all": {f"i{k}": k / 40 for k in range(40)}}}
    big_c = {"p_all": {f"c{k}": k / 40 - 0.2 for k in range(40)}}
    pooled = compare_with_control(big_a, big_c, ["p_all"], seeds=[0, 1, 2], B=500, alpha=0.05)["results"][0]
    assert not pooled["exact"] and pooled["n_relabellings"] == 1500 and pooled["p_floor"] == pytest.approx(1 / 1501)
    assert control_markdown({}) == "" and "| D | original | P_all | 3 | 2 |" in control_markdown(tiny)


def test_a_void_metric_is_shown_but_left_out_of_the_control_verdict():
    """acc void on the control (most answers malformed) and p_first void on the audited side: both rows are
    tested and marked, the verdict is p_all's alone (Bonferroni over one metric, not three); all void: no evidence."""
    ids = [f"i{k}" for k in range(40)]
    audited = {("D", "original"): {"acc": dict.fromkeys(ids, 0.0), "p_first": {i: 0.01 for i in ids},
                                   "p_all": {i: k / 40 for k, i in enumerate(ids)}}}
    control = {"acc": {f"c{k}": 0.0 for k in range(40)}, "p_first": {f"c{k}": 0.01 for k in range(40)},
               "p_all": {f"c{k}": k / 40 - 0.2 for k in range(40)}}
    metrics = ["acc", "p_first", "p_all"]
    plain = compare_with_control(audited, control, metrics, seeds=[0], B=999, alpha=0.05)
    block = compare_with_control(audited, control, metrics, seeds=[0], B=999, alpha=0.05,
                                 void={("D", "original"): {"p_first": "shape"}}, control_void={"acc": "malformed"})
    rows = {r["metric"]: r for r in block["results"]}
    assert rows["acc"]["void"] == "void on the control set: malformed" and rows["acc"]["p_value"] == 1.0
    assert rows["p_first"]["void"] == "void on the audited set: shape" and "void" not in rows["p_all"]
    (v,) = block["verdicts"]
    assert v["p_value"] == pytest.approx(rows["p_all"]["p_value"]) and v["driving_metric"] == "p_all"
    assert v["void"] == {"acc": rows["acc"]["void"], "p_first": rows["p_first"]["void"]} and not v["void_all"]
    assert plain["verdicts"][0]["p_value"] == pytest.approx(min(1.0, 3 * rows["p_all"]["p_value"]))  # diluted
    text = control_markdown(block)
    assert "| D | original | Acc (VOID) |" in text and "VOID rows are left out of the combined p" in text
    every = compare_with_control(audited, control, metrics, seeds=[0], B=999, alpha=0.05,
                                 control_void=dict.fromkeys(metrics, "x"))
    assert every["verdicts"][0]["void_all"] and not every["verdicts"][0]["contaminated"]
    assert "no: every metric is VOID" in control_markdown(every)


def _files(tmp_path, n_data=6, n_control=5, overlap=False):
    data, control = _set("D", "a", n_data, m=1), _set(CONTROL, "c", n_control, m=1)
    c_items = control.originals + ([data.originals[0]] if overlap else [])
    save_items(tmp_path / "data.jsonl", data.originals)
    save_items(tmp_path / "ref.jsonl", [r for rows in data.reference.values() for r in rows])
    save_items(tmp_path / "control.jsonl", c_items)
    c_refs = [r for rows in control.reference.values() for r in rows]
    c_refs += [Item("dup::r0", "other", "1", metadata={"original_id": data.originals[0].id})] if overlap else []
    save_items(tmp_path / "control_ref.jsonl", c_refs)
    return {"name": "x", "path": str(tmp_path / "data.jsonl"), "reference_path": str(tmp_path / "ref.jsonl"),
            "control_path": str(tmp_path / "control.jsonl"),
            "control_reference_path": str(tmp_path / "control_ref.jsonl")}


def test_load_datasets_adds_the_control_split(tmp_path):
    cfg = _files(tmp_path)
    out, issues = load_datasets(OmegaConf.create({**cfg, "limit": 4}))
    assert [d.split for d in out] == ["x", CONTROL] and not issues
    assert [it.id for it in out[1].originals] == ["c0", "c1", "c2", "c3"]  # the data's selection applies
    assert all(len(out[1].reference[it.id]) == 1 for it in out[1].originals)
    assert [d.split for d in load_datasets(OmegaConf.create({k: v for k, v in cfg.items() if "control" not in k}))[0]] \
        == ["x"]


def test_control_files_are_checked_before_any_model(tmp_path):
    cfg = _files(tmp_path)
    with pytest.raises(ConfigError, match=r"data\.control_path='nowhere\.jsonl': no such file"):
        load_datasets(OmegaConf.create({**cfg, "control_path": "nowhere.jsonl"}))
    with pytest.raises(ConfigError, match=r"data\.control_reference_path=.*no such file"):
        load_datasets(OmegaConf.create({**cfg, "control_reference_path": str(tmp_path / "none.jsonl")}))
    with pytest.raises(ConfigError, match="split name 'control'"):
        load_datasets(OmegaConf.create({**cfg, "name": CONTROL}))
    with pytest.raises(DataError, match="shares 1 question"):
        load_datasets(OmegaConf.create(_files(tmp_path, overlap=True)))


@pytest.mark.parametrize("given", [["data.control_path=c.jsonl"], ["data.control_reference_path=r.jsonl"]])
def test_control_keys_come_together_at_compose_time(given):
    with pytest.raises(ConfigError, match=r"^data\.control_reference_path=.*set exactly when data\.control_path is"):
        validate(compose("detect", "data.path=x", "data.reference_path=y", *given), job="detect")
    validate(compose("detect", "data.path=x", "data.reference_path=y", "data.control_path=c.jsonl",
                     "data.control_reference_path=r.jsonl"), job="detect")


def test_a_multi_convention_run_has_one_control_block(tmp_path):
    """probe.prefill=[probe,hash]: each convention's run compares with the control, and the top-level summary.json
    and table.md combine them (Bonferroni over every (convention, metric)), the primary's own verdict beside it."""
    from zcp.probe.multiconv import detect_prefill

    audited, control = _set("D", "a", 24), _set(CONTROL, "c", 20)
    leaked = {it.question: it.answer for it in audited.originals[:12]}
    s = detect_prefill(ShapePrior(leaked), [audited, control], PROBE, tmp_path, DetectSettings(**SETTINGS),
                       prefill=["probe", "hash"], primary="hash")
    block = s["control"]
    per_conv = {c: json.loads((tmp_path / f"conv-{c}" / "summary.json").read_text())["control"]
                for c in ("probe", "hash")}
    assert [(r["convention"], r["metric"]) for r in block["convention_results"]] == [
        (c, m) for c in ("probe", "hash") for m in ("p_first", "p_all")]
    smallest = min((r["p_value"], c, r["metric"]) for c, b in per_conv.items() for r in b["results"])
    (v,) = block["verdicts"]
    assert v["n_tests"] == 4 and v["p_value"] == pytest.approx(min(1.0, 4 * smallest[0]))
    driving = next(r for r in per_conv[v["driving_convention"]]["results"] if r["metric"] == v["driving_metric"])
    assert driving["p_value"] == smallest[0] and v["contaminated"]  # (ties: any of the smallest)
    assert v["primary"]["convention"] == "hash"
    assert v["primary"]["p_value"] == pytest.approx(per_conv["hash"]["verdicts"][0]["p_value"])
    for r in block["results"]:
        ps = [x["p_value"] for x in per_conv.values() for x in x["results"] if x["metric"] == r["metric"]]
        assert r["p_value"] == pytest.approx(min(1.0, 2 * min(ps)))
    table = (tmp_path / "table.md").read_text()
    assert "## Against the control set" in table and "primary `hash`" in table
    assert json.loads((tmp_path / "summary.json").read_text())["control"] == block
