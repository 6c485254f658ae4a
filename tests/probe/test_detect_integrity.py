"""Detection as a new user meets it: every case is a test (each fails on the code before the fix).

- a missing reference row names `data.missing_reference=skip`; with it the drop is a WARNING, a table.md line
  ("n = 3 of 5 items: 2 without a reference row, left out") and summary.json fields;
- the context-overflow error says what the positions are spent on and which keys lower it, and the value it
  offers fits; `skip` that leaves nothing to test is an error with nothing written; `truncate` whose budgets
  alone fill the context says so (was "could not truncate"); truncation cuts every version of an item alike;
- a malformed zero-CoT rate above 50% voids acc/con: WARNING, summary.json flag, table.md line;
- how prompts were rendered (chat template or plain template) is in summary.json, run_meta.json and table.md,
  and a directory of records rendered otherwise is refused;
- the troubleshooting lines of docs/detect.md quote the messages as they are printed.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from fakes import FakeBackend
from omegaconf import OmegaConf

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.errors import DataError, RunDirError
from zcp.probe.datasets import load_datasets
from zcp.probe.detect import DetectDataset, DetectSettings, detect, fit_context
from zcp.probe.prompts import ProbeConfig

REPO = Path(__file__).resolve().parents[2]
DETECT_DOC = (REPO / "docs" / "detect.md").read_text()  # its Troubleshooting section (moved from README.md)
QUESTION = "Tom has {a} apples and buys {b} more. How many apples does Tom have now?"


def _items(n: int = 5) -> tuple[list[Item], dict[str, list[Item]]]:
    items = [Item(f"i{k}", QUESTION.format(a=k + 3, b=k + 1), str(2 * k + 4)) for k in range(n)]
    ref = {it.id: [Item(f"{it.id}::r0", QUESTION.format(a=k + 5, b=k + 1), str(2 * k + 6),
                        metadata={"original_id": it.id})] for k, it in enumerate(items)}
    return items, ref


def _files(tmp_path: Path, n: int = 5, with_ref: int = 3) -> dict:
    """A benchmark of n items whose reference file covers only the first `with_ref` of them."""
    items, ref = _items(n)
    save_items(tmp_path / "bench.jsonl", items)
    save_items(tmp_path / "ref.jsonl", [r for it in items[:with_ref] for r in ref[it.id]])
    return {"name": "bench", "path": str(tmp_path / "bench.jsonl"), "format": "items",
            "reference_path": str(tmp_path / "ref.jsonl")}


def _hf(max_positions: int, chat_template: str | None = "default", chat: bool = True):
    from zcp.backends.hf import HFBackend
    from zcp.core.testing import CHAT_TEMPLATE, tiny_llama, train_tokenizer

    items, _ = _items(8)
    texts = [it.question + " The final answer is: \\[ \\boxed{12} \\]" for it in items] * 3
    tok = train_tokenizer(texts, vocab_size=300, chat_template=CHAT_TEMPLATE if chat_template == "default"
                          else chat_template)
    return HFBackend(tiny_llama(tok, seed=1, max_positions=max_positions), tok, chat=chat)


def _message(fn) -> str:
    with pytest.raises((DataError, RunDirError)) as e:
        fn()
    return str(e.value)


# ----------------------------------------------------------------------------------------- missing references

def missing_reference_message(tmp_path: Path) -> str:
    return _message(lambda: load_datasets(OmegaConf.create(_files(tmp_path))))


def test_missing_reference_error_names_the_option(tmp_path):
    msg = missing_reference_message(tmp_path)
    assert "2 original item(s) have no reference row: i3, i4 (of 5 selected)" in msg
    assert "set data.missing_reference=skip" in msg and "\n" not in msg


def test_items_left_out_for_lack_of_a_reference_are_a_warning_a_table_line_and_in_summary(tmp_path, caplog):
    cfg = OmegaConf.create({**_files(tmp_path), "missing_reference": "skip"})
    with caplog.at_level(logging.WARNING, logger="zcp.probe.detect"):
        (ds,), _ = load_datasets(cfg)
    assert ds.without_reference == ["i3", "i4"] and ds.n_selected == 5
    assert any(r.levelno == logging.WARNING and "2 of 5 selected item(s) have no reference row" in r.getMessage()
               for r in caplog.records)
    s = detect(FakeBackend({}), [ds], ProbeConfig(metrics=("acc",)), tmp_path / "run",
               DetectSettings(progress=False))
    entry = s["datasets"][0]
    assert (entry["n_selected"], entry["n_tested"], entry["left_out"]) == (5, 3, {"without a reference row": 2})
    assert s["results"][0]["n"] == 3
    table = (tmp_path / "run" / "table.md").read_text()
    assert "bench: n = 3 of 5 items: 2 without a reference row, left out" in table


def _run_detect_refused(tmp_path: Path, monkeypatch, *overrides: str) -> str:
    """run_detect through Hydra compose with every model loader patched to fail: the one-line message."""
    from configs import compose

    import zcp.backends.registry
    import zcp.config
    import zcp.probe.detect
    import zcp.probe.run

    def never(*a, **k):
        raise AssertionError("a model was loaded before the data mistake was refused")

    monkeypatch.setattr(zcp.backends.registry, "build_backend", never)
    monkeypatch.setattr(zcp.backends.registry, "build_backend", never)
    if not (tmp_path / "model" / "config.json").exists():
        backend = _hf(64)
        backend.model.save_pretrained(tmp_path / "model")
        backend.tokenizer.save_pretrained(tmp_path / "model")
    cfg = compose("detect", f"model.path={tmp_path / 'model'}", "logger=none", f"output_dir={tmp_path / 'run'}",
                  *overrides)
    msg = _message(lambda: zcp.probe.run.run_detect(cfg))
    assert "\n" not in msg and not (tmp_path / "run").exists()
    return msg


def test_missing_references_are_refused_by_run_detect_before_any_model_loads(tmp_path, monkeypatch):
    f = _files(tmp_path)
    msg = _run_detect_refused(tmp_path, monkeypatch, f"data.path={f['path']}", f"data.reference_path={f['reference_path']}")
    assert "have no reference row" in msg and "data.missing_reference=skip" in msg


def test_no_selected_item_with_a_reference_is_nothing_to_test_before_any_model_loads(tmp_path, monkeypatch):
    f = _files(tmp_path)
    _, ref = _items(5)
    save_items(tmp_path / "ref.jsonl", ref["i4"])  # only the last item has a reference row
    msg = _run_detect_refused(tmp_path, monkeypatch, f"data.path={f['path']}", f"data.reference_path={f['reference_path']}",
                              "data.limit=3", "data.missing_reference=skip")
    assert "nothing left to test in custom: none of its 3 selected item(s) has a reference row" in msg


# ----------------------------------------------------------------------------------------- context overflow

def overflow_message(budget: int = 120) -> str:
    items, ref = _items(4)
    backend = _hf(128)
    return _message(lambda: detect(backend, [DetectDataset("D", items, ref)], ProbeConfig(full_cot_max_tokens=budget),
                                   Path("/nonexistent/never-written"), DetectSettings(progress=False)))


def test_overflow_error_says_what_the_positions_are_spent_on_and_the_value_that_fits():
    msg = overflow_message()
    assert "8 of 8 probe prompts need more positions than the model's 128" in msg
    m = re.search(r"needs (\d+): (\d+) full-CoT prompt tokens \+ probe\.full_cot_max_tokens=120 ", msg)
    assert m and int(m.group(1)) == int(m.group(2)) + 120, msg
    fit = re.search(r"set probe\.full_cot_max_tokens=(\d+) or less", msg)
    assert fit and "probe.metrics without con" in msg and "data.on_overflow=skip" in msg, msg
    items, ref = _items(4)  # the value offered fits every prompt
    units = DetectDataset("D", items, ref).work()
    assert fit_context(units, _hf(128), ProbeConfig(full_cot_max_tokens=int(fit.group(1))), "error") == (units, [])


def nothing_left_message(tmp_path: Path) -> str:
    items, ref = _items(4)
    return _message(lambda: detect(_hf(64), [DetectDataset("D", items, ref)], ProbeConfig(), tmp_path / "run",
                                   DetectSettings(progress=False, on_overflow="skip")))


def test_skip_that_leaves_nothing_to_test_is_an_error_and_writes_nothing(tmp_path):
    msg = nothing_left_message(tmp_path)
    assert "nothing left to test in D: of 4 item(s) selected, 4 too long for the model's context" in msg
    assert not (tmp_path / "run").exists()
    from zcp.config import one_line_errors

    def entry_point() -> None:
        raise DataError(msg)

    with pytest.raises(SystemExit) as e:  # what an entry point makes of it: exit 2, one line
        one_line_errors(entry_point)()
    assert e.value.code == 2


def truncate_budget_message(tmp_path: Path) -> str:
    items, ref = _items(4)
    return _message(lambda: detect(_hf(64), [DetectDataset("D", items, ref)], ProbeConfig(full_cot_max_tokens=64),
                                   tmp_path / "run", DetectSettings(progress=False, on_overflow="truncate")))


def test_truncate_when_the_budget_alone_fills_the_context_names_the_budget(tmp_path):
    msg = truncate_budget_message(tmp_path)
    assert "data.on_overflow=truncate cannot fit item i0 (original): even with its whole question cut" in msg
    assert "+ probe.full_cot_max_tokens=64" in msg and "set probe.full_cot_max_tokens=" in msg
    assert "could not truncate" not in msg and not (tmp_path / "run").exists()


def _versions(n_orig: int, n_ref: int) -> list:
    """Units of one item: original and reference with n filler clauses before the question, a bare paraphrase."""
    filler = "In a big shop on a sunny day, "
    orig = Item("i0", filler * n_orig + QUESTION.format(a=3, b=4), "7")
    ref = Item("i0::r0", filler * n_ref + QUESTION.format(a=5, b=4), "9", metadata={"original_id": "i0"})
    para = Item("i0::p0", QUESTION.format(a=3, b=4), "7", metadata={"original_id": "i0"})
    return DetectDataset("D", [orig], {"i0": [ref]}, {"paraphrased": {"i0": [para]}}).work()


def test_truncation_cuts_every_version_of_an_item_by_the_same_characters():
    """The reference is longer than its original and the paraphrase fits uncut: all three lose the same
    leading characters (the largest cut any of them needs), and all fit."""
    from zcp.probe.prompts import positions_needed

    backend, probe = _hf(64), ProbeConfig(metrics=("p_first", "p_all"))
    units = _versions(1, 2)
    need = positions_needed(backend, [it for _, it in units], probe)
    assert need[0] > 64 and need[1] > need[0] and need[2] <= 64  # the setting the test needs
    out, report = fit_context(units, backend, probe, "truncate")
    cuts = {it.metadata.get("truncated_chars") for _, it in out}
    assert len(cuts) == 1 and cuts.pop() > 0
    assert all(it.question == "…" + u.question[out[0][1].metadata["truncated_chars"]:]
               for (_, it), (_, u) in zip(out, units, strict=True))
    assert max(positions_needed(backend, [it for _, it in out], probe)) <= 64
    assert {r["variant"] for r in report} == {"original", "reference", "paraphrased"}
    assert next(r for r in report if r["variant"] == "paraphrased")["action"].endswith("(as the other versions of its item)")


def unfair_truncation_message() -> str:
    return _message(lambda: fit_context(_versions(2, 4), _hf(64), ProbeConfig(metrics=("p_first", "p_all")),
                                        "truncate"))


def test_truncation_that_would_cut_a_whole_version_is_refused():
    msg = unfair_truncation_message()
    assert "data.on_overflow=truncate cannot fit item i0 fairly: its versions need their first" in msg
    assert "the whole question of its paraphrased row 'i0::p0'" in msg


# ----------------------------------------------------------------------------------------- malformed answers

def malformed_warning(tmp_path: Path, caplog) -> tuple[dict, str]:
    items = [Item(f"g{k}", f"GARBLE question {k}?", str(k)) for k in range(4)]
    ref = {it.id: [Item(f"{it.id}::r0", f"GARBLE other {it.id}?", "1", metadata={"original_id": it.id})]
           for it in items}
    with caplog.at_level(logging.WARNING, logger="zcp.probe.detect"):
        s = detect(FakeBackend({}, truth={it.question: it.answer for it in items}), [DetectDataset("D", items, ref)],
                   ProbeConfig(metrics=("acc", "con", "p_all")), tmp_path / "run",
                   DetectSettings(progress=False, bootstrap_samples=100))
    return s, next(r.getMessage() for r in caplog.records if "malformed" in r.getMessage())


def test_a_mostly_malformed_split_voids_acc_and_con(tmp_path, caplog):
    s, line = malformed_warning(tmp_path, caplog)
    flags = {(f["split"], f["variant"]): f["voids"] for f in s["malformed_warnings"]}
    assert flags == {("D", "original"): ["acc", "con"], ("D", "reference"): ["acc", "con"]}
    assert "D/original: 100% of zero-CoT answers are malformed (more than 50%): acc and con mean nothing here" in line
    table = (tmp_path / "run" / "table.md").read_text()
    assert "**Warning**: D/original: 100% of zero-CoT answers are malformed" in table


# ----------------------------------------------------------------------------------------- prompt rendering

def test_how_prompts_were_rendered_is_recorded_and_printed(tmp_path, caplog):
    items, ref = _items(3)
    probe = ProbeConfig(metrics=("p_first", "p_all"))
    with caplog.at_level(logging.WARNING, logger="zcp.probe.detect"):
        s = detect(_hf(256, chat_template=None), [DetectDataset("D", items, ref)], probe, tmp_path / "plain",
                   DetectSettings(progress=False, bootstrap_samples=100))
    r = s["rendering"]
    assert (r["kind"], r["template"], r["reason"]) == ("plain_template", "{user}\n{prefix}",
                                                       "the tokenizer has no chat template")
    assert r["example_zero_cot"] == items[0].question + "\n" + probe.zero_cot_prefix
    meta = json.loads((tmp_path / "plain" / "run_meta.json").read_text())
    assert meta["rendering"]["kind"] == "plain_template"
    assert "Prompts: the plain template '{user}\\n{prefix}' (the tokenizer has no chat template)" in \
        (tmp_path / "plain" / "table.md").read_text()
    assert any("prompts: the plain template" in x.getMessage() for x in caplog.records)
    c = detect(_hf(256), [DetectDataset("D", items, ref)], probe, tmp_path / "chat",
               DetectSettings(progress=False, bootstrap_samples=100))["rendering"]
    assert c["kind"] == "chat_template" and len(c["template_sha256"]) == 16 and "<|assistant|>" in c["example_zero_cot"]


def rendering_changed_message(tmp_path: Path) -> str:
    items, ref = _items(3)
    probe = ProbeConfig(metrics=("p_first", "p_all"))
    settings = DetectSettings(progress=False, bootstrap_samples=100)
    detect(_hf(256), [DetectDataset("D", items, ref)], probe, tmp_path / "run", settings)
    return _message(lambda: detect(_hf(256, chat=False), [DetectDataset("D", items, ref)], probe, tmp_path / "run",
                                   settings))


def test_records_rendered_otherwise_are_not_resumed(tmp_path):
    assert "holds records of prompts rendered otherwise" in rendering_changed_message(tmp_path)


# -------------------------------------------------------------------------------- the user guide

def test_readme_troubleshooting_quotes_the_messages_as_printed(tmp_path, caplog):
    """Each message's stable part is in the message as printed now and in docs/detect.md's troubleshooting list:
    a reworded message, or a line of the guide left behind, fails here."""
    section = DETECT_DOC[DETECT_DOC.index("## Troubleshooting"):]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    printed = {
        "missing": missing_reference_message(tmp_path / "a"),
        "overflow": overflow_message(),
        "nothing": nothing_left_message(tmp_path / "b"),
        "truncate": truncate_budget_message(tmp_path / "c"),
        "unfair": unfair_truncation_message(),
    }
    stable = {
        "missing": ["original item(s) have no reference row:", "selected); set data.missing_reference=skip to leave "
                    "them out (counted in table.md and summary.json)"],
        "overflow": ["probe prompts need more positions than the model's", "full-CoT prompt tokens + "
                     "probe.full_cot_max_tokens=", "(the full-CoT generation con compares against)); set "
                     "probe.full_cot_max_tokens=", "or less, or probe.metrics without con (no full-CoT generation), "
                     "or data.on_overflow=skip (leave them out) or data.on_overflow=truncate (cut the start of every "
                     "version of an item's question by the same number of characters)"],
        "nothing": ["nothing left to test in", "item(s) selected,"],
        "truncate": ["data.on_overflow=truncate cannot fit item", "(original): even with its whole question cut the "
                     "probe needs", "positions of the model's"],
        "unfair": ["cannot fit item", "fairly: its versions need their first", "characters cut, the whole question of its"],
    }
    for name, parts in stable.items():
        for part in parts:
            assert part in printed[name], (name, part, printed[name])
            assert part in section, (name, part)
    _, line = malformed_warning(tmp_path / "m", caplog)
    part = "of zero-CoT answers are malformed (more than 50%): acc and con mean nothing here (a malformed answer " \
           "scores as wrong on every version of an item); check probe.zero_cot_prefix and the prompt rendering"
    assert part in line and part in section
    table = (tmp_path / "m" / "run" / "table.md").read_text()
    assert "**Warning**:" in table and "`**Warning**:` line in table.md" in section
    left = "selected item(s) have no reference row and are left out (data.missing_reference=skip); n ="
    with caplog.at_level(logging.WARNING, logger="zcp.probe.detect"):
        load_datasets(OmegaConf.create({**_files(tmp_path / "a"), "missing_reference": "skip"}))
    assert any(left in r.getMessage() for r in caplog.records) and left in section
    from zcp.probe.prompts import describe_rendering

    plain = describe_rendering({"kind": "plain_template", "template": "{user}\n{prefix}", "probe_mode": "prefill",
                                "reason": "the tokenizer has no chat template"})
    assert f"prompts: {plain}" in section
    assert "Items left out (listed in summary.json): bench: n = " in \
        _left_out_table(tmp_path / "t") and "Items left out (listed in summary.json): gsm8k: n = 26 of 40 items: " \
        "14 without a reference row, left out." in section


def _left_out_table(tmp_path: Path) -> str:
    tmp_path.mkdir()
    (ds,), _ = load_datasets(OmegaConf.create({**_files(tmp_path), "missing_reference": "skip"}))
    detect(FakeBackend({}), [ds], ProbeConfig(metrics=("acc",)), tmp_path / "run", DetectSettings(progress=False))
    return (tmp_path / "run" / "table.md").read_text()
