"""What summary.json warns about is also a `**Warning**:` line of table.md (one convention and several): the repeated
questions merged, a reference set identical to the data, `data.sample` larger than the data (also a WARNING and a
data warning), and a unit the records hold twice with different content (which copy was kept)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from configs import compose
from fakes import FakeBackend

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.probe.detect import DetectDataset, DetectSettings, detect
from zcp.probe.prompts import ProbeConfig
from zcp.probe.report import warning_lines

Q = "Ann has {a} pens and gets {b} more. How many pens?"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_tok, tiny_model) -> Path:
    root = tmp_path_factory.mktemp("warn_model") / "model"
    tiny_model.save_pretrained(root)
    tiny_tok.save_pretrained(root)
    return root


def _files(tmp_path: Path) -> tuple[Path, Path]:
    """4 items and a copy of the first (another id, the same question); a reference set that repeats every question
    word for word (no perturbation)."""
    items = [Item(f"q{i}", Q.format(a=i + 10, b=3), str(i + 13)) for i in range(4)]
    copy = Item("copy0", items[0].question, items[0].answer)
    refs = [Item(f"{it.id}::r0", it.question, it.answer, metadata={"original_id": it.id}) for it in items]
    save_items(tmp_path / "bench.jsonl", [*items, copy])
    save_items(tmp_path / "ref.jsonl", refs)
    return tmp_path / "bench.jsonl", tmp_path / "ref.jsonl"


def _run_detect(model_dir: Path, tmp_path: Path, monkeypatch, *extra: str) -> tuple[dict, str]:
    import zcp.backends.registry
    from zcp.probe.run import run_detect

    data, ref = _files(tmp_path)
    monkeypatch.setattr(zcp.backends.registry, "build_backend", lambda *a, **k: FakeBackend({}))
    out = tmp_path / "run"
    run_detect(compose("detect", f"model.path={model_dir}", f"data.path={data}", f"data.reference_path={ref}",
                       "data.format=items", "data.name=bench", "data.on_duplicate=merge", "data.sample=10",
                       "logger=none", "run.progress=false", "probe.metrics=[p_first,p_all]",
                       "stats.bootstrap_samples=50", f"output_dir={out}", *extra))
    return json.loads((out / "summary.json").read_text()), (out / "table.md").read_text()


@pytest.mark.parametrize("prefill", [(), ("probe.prefill=[probe,hash]",)])
def test_data_warnings_merged_duplicates_and_a_sample_larger_than_the_data_are_table_lines(model_dir, tmp_path,
                                                                                           monkeypatch, caplog,
                                                                                           prefill):
    with caplog.at_level(logging.WARNING, logger="zcp.benchmarks.dataset"):
        summary, table = _run_detect(model_dir, tmp_path, monkeypatch, *prefill)
    bench = str(tmp_path / "bench.jsonl")
    sample = "data.sample=10 is larger than the data: all 4 of its usable items are taken (no random subset)"
    assert {"file": bench, "warning": sample} in summary["data_warnings"]
    assert any(sample in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert f"**Warning**: {bench}: {sample}." in table
    assert f"**Warning**: {tmp_path / 'ref.jsonl'}: reference set identical to the data: all 4 reference rows" in table
    assert (f"**Warning**: {bench}: 1 repeated question(s) merged, each counted once with its first copy kept "
            "(copy0 = q0; listed in summary.json skipped_rows).") in table


def test_a_unit_held_twice_with_different_content_is_warned_naming_the_copy_kept(tmp_path, caplog):
    items = [Item(f"i{k}", Q.format(a=k + 10, b=2), str(k + 12)) for k in range(3)]
    ref = {it.id: [Item(f"{it.id}::r0", Q.format(a=k + 50, b=2), str(k + 52), metadata={"original_id": it.id})]
           for k, it in enumerate(items)}
    ds, probe, settings = DetectDataset("D", items, ref), ProbeConfig(metrics=("p_first",)), DetectSettings(progress=False)
    first = detect(FakeBackend({}), [ds], probe, tmp_path, settings)
    assert "record_warnings" not in first and "**Warning**" not in (tmp_path / "table.md").read_text()
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    copy = {**json.loads(lines[0]), "p_first": 0.75}  # a second writer probed the unit otherwise
    (tmp_path / "records.jsonl").write_text("\n".join([*lines, json.dumps(copy)]) + "\n")
    with caplog.at_level(logging.WARNING, logger="zcp.core.records"):
        again = detect(FakeBackend({}), [ds], probe, tmp_path, settings)
    (w,) = again["record_warnings"]
    assert w["units"] == 1 and "('D', 'original', 'i0', 0): p_first differ, p_first 0.1" in w["warning"]
    assert "0.75 in the later); the first copy in the file kept, the later dropped" in w["warning"]
    assert any(r.getMessage() == w["warning"] for r in caplog.records)
    assert f"**Warning**: {w['warning']}." in (tmp_path / "table.md").read_text()
    assert again["results"] == first["results"]  # the first copy, as before the second writer
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == len(lines)


def test_warnings_of_single_rows_are_counted_per_file_and_nothing_adds_no_line():
    rows = [{"file": "r.jsonl", "row": r, "id": f"a{r}::r0", "warning": f"reference answer equals the original's ({r})"}
            for r in (2, 4)]
    assert warning_lines({"data_warnings": rows}) == [
        "", "**Warning**: r.jsonl: 2 row(s) warned about (listed in summary.json data_warnings), e.g. row 2 (a2::r0): "
            "reference answer equals the original's (2)."]
    assert warning_lines({"data_warnings": [], "skipped_rows": [{"file": "d", "row": 3, "reason": "x"}]}) == []


def test_auto_warns_when_few_of_the_outputs_read_state_an_answer_in_any_convention(tmp_path):
    """auto reads every output (all fit the context), but only 2 of C's 12 end on a convention: its reading rests on
    2 outputs, fewer than probe.auto.min_read; a warning in the reading, the log and table.md."""
    from conv_fakes import ConventionBackend, toy_datasets

    from zcp.probe.multiconv import detect_prefill, read_conventions
    from zcp.probe.probe_config import AutoPrefillConfig

    datasets, memorised, truth = toy_datasets()
    stated = {it.question for it in datasets[0].originals[:2]} | {it.question for it in datasets[1].originals}

    class Unsure(ConventionBackend):  # C's full-CoT outputs state no answer but for 2 of them
        def generate(self, requests):
            out = super().generate(requests)
            return [o if r.prompt.assistant_prefix or r.prompt.user in stated else "Let me think. Hard to say."
                    for r, o in zip(requests, out, strict=True)]

    fb = Unsure(memorised, truth=truth)
    auto = AutoPrefillConfig(neutral_n=0, always=[])
    assert auto.min_read == 10
    reading, _ = read_conventions(fb, datasets, ProbeConfig(), auto, DetectSettings(progress=False))
    (w,) = reading["warnings"]  # U's 12 outputs all state one: no warning for U
    assert w == ("auto: only 2 of the 12 full-CoT outputs read on C end on an answer convention (10 state no answer; "
                 "probe.auto.min_read=10): its reading rests on few outputs")
    assert not read_conventions(fb, datasets, ProbeConfig(), AutoPrefillConfig(neutral_n=0, always=[], min_read=2),
                                DetectSettings(progress=False))[0]["warnings"]
    detect_prefill(fb, datasets, ProbeConfig(metrics=("p_all",)), tmp_path, DetectSettings(progress=False),
                   prefill="auto", auto=auto)
    assert f"**Warning**: {w}." in (tmp_path / "table.md").read_text()


def test_min_read_at_its_default_keeps_an_auto_runs_directory_and_key():
    from zcp.probe.multiconv import prefill_key, without_default_prefill
    from zcp.probe.probe_config import AutoPrefillConfig

    base = ("detect", "data.path=x", "data.reference_path=y", "probe.prefill=auto")
    assert "min_read" not in without_default_prefill(compose(*base)).probe.auto
    assert without_default_prefill(compose(*base, "probe.auto.min_read=3")).probe.auto.min_read == 3
    assert "min_read" not in prefill_key("auto", AutoPrefillConfig(), None)["auto"]
