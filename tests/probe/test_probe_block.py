"""Units per backend call in detection: at the default chunk size the first chunk holds run.chunk_first units and
is timed (the cost plan's ETA), the later ones hold about run.chunk_seconds of work each, at most what fills the
backend's batches (`HFBackend.score_block`); an explicit run.chunk_size is kept; the records depend on none of it."""

import json
import logging

import pytest

from zcp.config.groups import RunConfig
from zcp.core.items import Item
from zcp.probe import cost as cost_mod
from zcp.probe import detect as detect_mod
from zcp.probe.cost import CostPlan, chunk_units, format_seconds, measured, plan_cost
from zcp.probe.detect import DetectDataset, DetectSettings, detect, probe_block
from zcp.probe.prompts import ProbeConfig


class _Plain:
    """A backend without a preferred block (an API engine, a wrapper)."""


def _backend(rows: int, gen_rows: int = 32):
    from zcp.backends.hf import HFBackend
    from zcp.core.testing import tiny_llama, train_tokenizer

    texts = [f"Tom has {k + 3} apples and buys {2 * k + 1} more. How many apples? {3 * k + 4}" for k in range(40)]
    tok = train_tokenizer(texts * 3, vocab_size=300)
    return HFBackend(tiny_llama(tok, seed=1), tok, max_batch_size=rows, gen_batch_size=gen_rows)


def _data(n: int = 40):
    items = [Item(f"i{k}", f"Tom has {k + 3} apples and buys {2 * k + 1} more. How many apples?", str(3 * k + 4))
             for k in range(n)]
    ref = {it.id: [Item(f"{it.id}::r0", f"Tom has {k + 5} apples and buys {2 * k + 1} more. How many apples?",
                        str(3 * k + 6), metadata={"original_id": it.id})] for k, it in enumerate(items)}
    return items, ref


def _count_calls(backend, calls: list[int], clock: list[float] | None = None, per_request: float = 0.0):
    """Count the requests of each score call; with `clock`, advance that fake clock by `per_request` each."""
    score = backend.score

    def counted(requests, _score=score):
        calls.append(len(requests))
        if clock is not None:
            clock[0] += per_request * len(requests)
        return _score(requests)

    backend.score = counted


def test_probe_block_default_explicit_and_other_backends():
    default = RunConfig.chunk_size
    backend = _backend(rows=256)
    assert backend.score_block == 4 * 256
    assert probe_block(backend, default) == 1024
    assert probe_block(backend, 8) == 8 and probe_block(backend, 5000) == 5000  # an explicit size is kept
    assert probe_block(_backend(rows=4), default) == default  # batches the default chunk already fills
    assert probe_block(_Plain(), default) == default


def test_default_chunking_makes_few_calls_and_the_same_records(tmp_path):
    items, ref = _data()
    probe = ProbeConfig(metrics=("p_first", "p_all"))
    calls: dict[str, list[int]] = {}
    runs = {}
    for name, chunk in (("default", RunConfig.chunk_size), ("chunk7", 7)):
        backend = _backend(rows=64)  # score_block 256: after the timed first chunk, the other 72 units in one call
        calls[name] = []
        _count_calls(backend, calls[name])
        runs[name] = detect(backend, [DetectDataset("D", items, ref)], probe, tmp_path / name,
                            DetectSettings(seeds=[0], bootstrap_samples=200, chunk_size=chunk, progress=False))
    assert calls["default"] == [RunConfig.chunk_first, 80 - RunConfig.chunk_first]  # scoring is fast: capped chunk
    assert calls["chunk7"] == [7] * 11 + [3]  # an explicit size: every chunk, the first included
    assert (tmp_path / "default" / "records.jsonl").read_bytes() == (tmp_path / "chunk7" / "records.jsonl").read_bytes()
    assert runs["default"]["results"] == runs["chunk7"]["results"]


@pytest.mark.parametrize("seconds,expected", [(10.0, [3] + [10] * 7 + [7]), (2.5, [3] + [3] * 25 + [2])])
def test_chunks_hold_about_chunk_seconds_of_measured_work(tmp_path, monkeypatch, seconds, expected):
    """A fake clock that advances 1 s per scored prompt: the chunks after the timed first one hold the units that
    take chunk_seconds at that rate (never fewer than the first chunk's); the log line and summary.json carry the
    plan and its ETA."""
    clock = [0.0]
    monkeypatch.setattr(detect_mod.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(cost_mod.time, "perf_counter", lambda: clock[0])
    items, ref = _data()
    backend = _backend(rows=64)
    calls: list[int] = []
    _count_calls(backend, calls, clock, per_request=1.0)
    out = tmp_path / "run"
    summary = detect(backend, [DetectDataset("D", items, ref)], ProbeConfig(metrics=("p_first", "p_all")), out,
                     DetectSettings(seeds=[0], bootstrap_samples=200, progress=False, chunk_first=3,
                                    chunk_seconds=seconds))
    assert calls == expected and sum(calls) == 80
    plan = summary["cost_plan"]
    assert plan["units"] == plan["todo"] == plan["probes"] == plan["score_requests"] == 80
    assert plan["zero_cot_generations"] == plan["full_cot_generations"] == 0
    assert plan["warmup"]["units"] == 3 and plan["warmup"]["seconds"] == pytest.approx(3.0)
    assert plan["warmup"]["pass_seconds"]["score"] == pytest.approx(3.0)
    assert plan["eta_seconds"] == pytest.approx(77.0)
    assert plan["chunk_units"] == expected[1]
    assert "cost_plan" not in json.loads((out / "run_meta.json").read_text())  # timings: not part of the run's identity
    records = (out / "records.jsonl").read_bytes()
    # the same records as one explicit chunk of everything
    other = _backend(rows=64)
    detect(other, [DetectDataset("D", items, ref)], ProbeConfig(metrics=("p_first", "p_all")), tmp_path / "one",
           DetectSettings(seeds=[0], bootstrap_samples=200, progress=False, chunk_size=80))
    assert (tmp_path / "one" / "records.jsonl").read_bytes() == records


def test_plan_line_is_logged_before_and_after_the_first_chunk(tmp_path, caplog):
    items, ref = _data(6)
    probe = ProbeConfig(metrics=("acc", "con", "p_first", "p_all"), zero_cot_max_tokens=4, full_cot_max_tokens=6)
    with caplog.at_level(logging.INFO, logger="zcp.probe.detect"):
        summary = detect(_backend(rows=64, gen_rows=4), [DetectDataset("D", items, ref)], probe, tmp_path / "run",
                         DetectSettings(seeds=[0], bootstrap_samples=200, progress=False, chunk_first=4))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cost plan:")]
    assert len(lines) == 2
    assert lines[0] == ("cost plan: 12 units to probe, 12 distinct prompts: 12 score requests, 12 zero-CoT "
                        "generations of <= 4 tokens, 12 full-CoT generations of <= 6 tokens; timing the first "
                        "chunk for an ETA")
    assert "first chunk (4 units, 4 prompts) took" in lines[1] and "ETA ~" in lines[1]
    assert "for the other 8 prompts (an estimate" in lines[1]
    plan = summary["cost_plan"]
    assert plan["line"] == lines[1]
    assert set(plan["warmup"]["pass_seconds"]) == {"score", "zero-CoT", "full-CoT"}
    assert all(v > 0 for v in plan["warmup"]["pass_seconds"].values())  # each pass ran and was timed


@pytest.mark.parametrize("metrics,first", [(("acc", "p_first"), 5), (("p_first", "p_all"), 2)])
def test_the_first_chunk_fills_a_generation_batch_when_the_metrics_generate(tmp_path, metrics, first):
    """chunk_first=2 under a backend that generates 5 rows per batch: a generating run's chunks hold at least 5
    units (a chunk is one generate call; fewer prompts decode in part-empty batches), a scoring-only run keeps 2."""
    items, ref = _data(10)
    backend = _backend(rows=64, gen_rows=5)
    assert backend.generate_block == 5
    calls: list[int] = []
    _count_calls(backend, calls)
    detect(backend, [DetectDataset("D", items, ref)], ProbeConfig(metrics=metrics, zero_cot_max_tokens=3), tmp_path,
           DetectSettings(seeds=[0], bootstrap_samples=200, progress=False, chunk_first=2))
    assert calls[0] == first and sum(calls) == 20


def test_resumed_run_plans_only_what_is_left(tmp_path):
    items, ref = _data(10)
    probe = ProbeConfig(metrics=("p_first",))
    settings = DetectSettings(seeds=[0], bootstrap_samples=200, progress=False, chunk_size=5)
    out = tmp_path / "run"
    first = detect(_backend(rows=64), [DetectDataset("D", items, ref)], probe, out, settings)
    assert first["cost_plan"]["todo"] == 20 and first["cost_plan"]["warmup"]["units"] == 5
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    (out / "records.jsonl").write_text("".join(lines[:7]))  # a run killed after 7 units
    again = detect(_backend(rows=64), [DetectDataset("D", items, ref)], probe, out, settings)
    assert again["cost_plan"]["todo"] == again["cost_plan"]["probes"] == 13
    assert again["cost_plan"]["line"].startswith("cost plan: 13 units to probe (7 of 20 already in records)")
    assert (out / "records.jsonl").read_text().splitlines(keepends=True) == lines
    done = detect(_backend(rows=64), [DetectDataset("D", items, ref)], probe, out, settings)
    assert done["cost_plan"]["todo"] == 0 and done["cost_plan"]["warmup"] is None


def test_cost_helpers():
    assert chunk_units(2.0, 30.0, 1.0, 1024) == 15
    assert chunk_units(2.0, 30.0, 0.5, 1024) == 30  # units sharing prompts cost half as much each
    assert chunk_units(100.0, 30.0, 1.0, 1024) == 1  # at least one unit
    assert chunk_units(100.0, 30.0, 1.0, 1024, floor=8) == 8  # at least the first chunk's size
    assert chunk_units(100.0, 30.0, 1.0, 4, floor=8) == 4  # which the cap bounds
    assert chunk_units(1e-4, 30.0, 1.0, 1024) == 1024  # at most the backend's block
    assert chunk_units(0.0, 30.0, 1.0, 64) == 64
    plan = plan_cost(10, 10, 10, ProbeConfig(metrics=("con",), full_cot_max_tokens=100))
    assert (plan.score_requests, plan.zero_cot_generations, plan.full_cot_generations) == (0, 10, 10)
    assert plan.full_cot_max_tokens == 100 and plan.zero_cot_max_tokens == 32
    measured(plan, 2, 2, 8.0, {"score": 0.0, "zero-CoT": 1.0, "full-CoT": 7.0}, 20.0, 64)
    assert plan.eta_seconds == 32.0 and plan.chunk_units == 5 and plan.chunk_seconds == 20.0
    slow = measured(plan_cost(10, 10, 10, ProbeConfig()), 1, 1, 60.0, {}, 30.0, 64)
    assert slow.chunk_units == 1 and "chunks of 1 unit (~60 s each)" in slow.line()
    assert "zero-CoT 1.0 s, full-CoT 7.0 s" in plan.line() and "score 0.0" not in plan.line()
    assert isinstance(CostPlan(1, 1, 1).to_dict()["line"], str)
    assert [format_seconds(s) for s in (42, 210, 7200)] == ["42 s", "3.5 min", "2.0 h"]
