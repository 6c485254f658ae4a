"""A backend added from outside the package, the way docs/extending.md ("A backend") shows: one module with an
engine (a `zcp.backends.Backend` subclass that declares its capabilities) and its settings dataclass, registered
with `register_backend("toy", builder, settings=ToySettings)`. No zcp/ file is edited: `model.backend=toy` and
`model.toy.*` then compose, validate and run a detection; a bad `model.toy.*` key or value fails in one line.

The toy engine is an arithmetic oracle that "memorised" the questions of a JSONL file (`model.toy.seen_path`):
on those it answers at once and gives the gold answer probability `p_seen` per character; elsewhere it only
gets the sum right when it reasons (full CoT), and gives `p_unseen`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from configs import compose
from hydra.errors import ConfigCompositionException

from zcp.backends import (
    Backend,
    GenerationRequest,
    Prompt,
    ScoreRequest,
    ScoreResult,
    build_backend,
    register_backend,
    unregister_backend,
)
from zcp.benchmarks.loaders import save_items
from zcp.config.checks import check_value
from zcp.config.schemas import validate
from zcp.core.items import Item
from zcp.errors import ConfigError, DataError


# ------------------------------------------------------------------------------------------ the engine's module
@dataclass
class ToySettings:
    """`model.toy.*`: what the toy engine knows and how sure it is."""

    seen_path: str | None = None  # a JSONL of items (question, answer) the engine has memorised
    p_seen: float = 0.9  # per-character probability of the gold answer on a memorised question
    p_unseen: float = 0.2  # ... on any other question
    context_length: int = 1024  # positions (words) a probe may use

    def __post_init__(self) -> None:
        for key in ("p_seen", "p_unseen"):
            check_value(0.0 < getattr(self, key) < 1.0, f"model.toy.{key}", getattr(self, key), "in (0, 1)")
        check_value(self.context_length >= 1, "model.toy.context_length", self.context_length, ">= 1")


class ToyEngine(Backend):
    """Pre-fills, returns log-probs (the defaults), counts tokens (words: it implements `count_tokens`) and says how
    it renders; no local tokenizer."""

    def __init__(self, settings: ToySettings) -> None:
        self.settings = settings
        self.context_length = settings.context_length
        self.fingerprint = f"toy:{settings.p_seen}:{settings.p_unseen}"
        self.seen: set[str] = set()
        if settings.seen_path:
            with open(settings.seen_path) as f:
                self.seen = {json.loads(line)["question"] for line in f if line.strip()}
        self.calls = {"score": 0, "generate": 0}

    def render(self, prompt: Prompt) -> str:
        """The user turn, then the pre-filled assistant prefix (raw prompts: concatenated)."""
        if not prompt.chat:
            return prompt.user + prompt.assistant_prefix
        user = f"{prompt.system}\n\n{prompt.user}" if prompt.system else prompt.user
        return f"{user}\n{prompt.assistant_prefix}"

    def rendering(self) -> dict[str, Any]:
        """The plain template `render` uses (recorded in summary.json and run_meta.json)."""
        return {"kind": "plain_template", "template": "{user}\n{prefix}", "reason": "the toy engine has no template"}

    def count_tokens(self, prompts: Sequence[Prompt], texts: Sequence[str] = ()) -> tuple[list[int], list[int]]:
        """Words, as this engine's tokens."""
        return [len(self.render(p).split()) for p in prompts], [len(t.split()) for t in texts]

    def _knows(self, prompt: Prompt) -> bool:
        return any(q in prompt.user for q in self.seen)

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """log p per character of the continuation: `p_seen` on memorised questions, else `p_unseen`."""
        self.calls["score"] += 1
        out = []
        for r in requests:
            p = self.settings.p_seen if self._knows(r.prompt) else self.settings.p_unseen
            out.append(ScoreResult(tuple(math.log(p) for _ in r.continuation)))
        return out

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Zero-CoT (pre-filled box): the sum on memorised questions, one off elsewhere; full CoT: the sum."""
        self.calls["generate"] += 1
        out = []
        for r in requests:
            total = sum(int(x) for x in re.findall(r"\d+", r.prompt.user))
            if r.prompt.assistant_prefix:
                out.append(f"{total if self._knows(r.prompt) else total + 1}}} \\]")
            else:
                out.append(f"Adding up: {total}. The final answer is: \\[ \\boxed{{{total}}} \\]")
        return out


BUILT: list[ToyEngine] = []


def build_toy(cfg: Any, progress: bool = False) -> ToyEngine:
    """The builder `register_backend` takes: the checked model config in, the engine out."""
    BUILT.append(ToyEngine(cfg.toy))
    return BUILT[-1]


# ------------------------------------------------------------------------------------------------- the tests
@pytest.fixture
def toy():
    """The engine registered for one test, then removed (so other tests compose the plain model group)."""
    register_backend("toy", build_toy, settings=ToySettings)
    BUILT.clear()
    try:
        yield
    finally:
        unregister_backend("toy")


def _benchmark(tmp_path: Path, n: int = 12) -> tuple[Path, Path]:
    items, refs = [], []
    for i in range(n):
        a, b = 10 + 3 * i, 2 + i % 7
        items.append(Item(f"q{i}", f"Ann has {a} pens and gets {b} more. How many pens?", str(a + b)))
        refs += [Item(f"q{i}::r{j}", f"Ann has {a + 1 + j} pens and gets {b} more. How many pens?", str(a + 1 + j + b),
                      metadata={"original_id": f"q{i}"}) for j in range(2)]
    save_items(tmp_path / "d.jsonl", items)
    save_items(tmp_path / "r.jsonl", refs)
    return tmp_path / "d.jsonl", tmp_path / "r.jsonl"


def test_toy_engine_runs_a_detection_through_the_composed_config(toy, tmp_path):
    """model.backend=toy with model.toy.* overrides composes, validates and detects the memorised benchmark."""
    from zcp.probe.run import run_detect

    data, refs = _benchmark(tmp_path)
    common = ["model.backend=toy", "model.path=toy/echo", f"model.toy.seen_path={data}", f"data.path={data}",
              f"data.reference_path={refs}", "logger=none", "run.progress=false", "stats.bootstrap_samples=200",
              "probe.full_cot_max_tokens=16"]
    summary = run_detect(compose("detect", *common, "model.toy.p_seen=0.8", f"output_dir={tmp_path / 'out'}"))
    engine = BUILT[-1]
    assert engine.settings.p_seen == 0.8 and engine.settings.p_unseen == 0.2  # override and default reached it
    assert engine.calls["score"] and engine.calls["generate"]  # p metrics and acc/con both ran through it
    assert summary["model"] == "echo"  # build_backend names it after model.path
    records = [json.loads(x) for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    orig = [r for r in records if r["variant"] == "original"]
    ref = [r for r in records if r["variant"] != "original"]
    assert orig and ref and all(math.isclose(r["p_first"], 0.8) for r in orig)
    assert all(math.isclose(r["p_first"], 0.2) for r in ref)
    assert all(r["correct"] for r in orig) and not any(r["correct"] for r in ref), records[:2]
    assert summary["verdicts"][0]["contaminated"], summary["verdicts"]
    meta = json.loads((tmp_path / "out" / "run_meta.json").read_text())
    assert meta["backend_fingerprint"] == "toy:0.8:0.2" and meta["rendering"]["kind"] == "plain_template"
    # the declared capabilities reach the probe: its context check counts the engine's tokens against its length
    with pytest.raises(DataError, match="need more positions than the model's 20 "):
        run_detect(compose("detect", *common, "model.toy.context_length=20",
                           f"output_dir={tmp_path / 'short'}"))


def test_toy_settings_are_typed_and_checked_in_one_line(toy):
    """A misspelt model.toy key fails when composing (as model.vllm.* does) and, added with +, in validate; a value
    out of range fails naming the key; the library call (build_backend on a dict) checks the same way."""
    for override in ("model.toy.p_sen=0.5", "model.toy.context_length=many"):  # Hydra types the group
        with pytest.raises(ConfigCompositionException):
            compose("detect", "model.backend=toy", override)
    for override, key in (("+model.toy.p_sen=0.5", r"model\.toy: unknown key 'p_sen'; did you mean 'p_seen'"),
                          ("model.toy.p_seen=2", r"model\.toy\.p_seen=2(\.0)?: must be in \(0, 1\)")):
        with pytest.raises(ConfigError, match=key) as err:
            validate(compose("detect", "model.backend=toy", override), job="detect")
        assert "\n" not in str(err.value)
    for values, key in (({"p_sen": 0.5}, r"model\.toy: unknown key 'p_sen'"),
                        ({"context_length": "many"}, r"model\.toy\.context_length='many': must be an integer")):
        with pytest.raises(ConfigError, match=key):  # a model config that is a plain dict (reference generators...)
            build_backend({"backend": "toy", "path": "toy/echo", "toy": values})
    assert build_backend({"backend": "toy", "path": "toy/echo"}).settings == ToySettings()  # defaults when not given
    # the built-in groups are untouched: their keys and messages are the same with an engine registered
    with pytest.raises(ConfigError, match=r"model\.vllm\.tensor_parallel_size"):
        validate(compose("detect", "model.vllm.tensor_parallel_size=0"), job="detect")


def test_an_engine_that_does_not_declare_its_capabilities_is_refused(toy, monkeypatch):
    """A builder returning an object that neither subclasses Backend nor declares every member is refused by name."""
    import zcp.backends.registry as registry

    class Bare:
        def score(self, requests):  # pragma: no cover - never called
            return []

    monkeypatch.setitem(registry._REGISTRY, "toy", lambda cfg, progress: Bare())
    with pytest.raises(TypeError, match=r"lacks \[.*'supports_prefill'.*\]; subclass zcp\.backends\.Backend"):
        build_backend({"backend": "toy", "path": "toy/echo"})


def test_unregistered_engine_leaves_the_model_group_as_it_was(toy):
    """After unregister_backend the toy keys are unknown again (the fixture's teardown relies on this)."""
    unregister_backend("toy")
    try:
        with pytest.raises(ConfigCompositionException):
            compose("detect", "model.toy.p_seen=0.5")
        with pytest.raises(ConfigError, match=r"model\.backend"):
            validate(compose("detect", "model.backend=toy"), job="detect")
    finally:
        register_backend("toy", build_toy, settings=ToySettings)  # the fixture unregisters it again


def test_the_base_model_of_a_did_keeps_the_engine_settings(toy):
    """base_model.path over the audited model's config: the base model runs on the same engine settings."""
    from zcp.probe.did import base_model_config

    base = base_model_config({"path": "toy/base"}, {"backend": "toy", "path": "toy/echo", "toy": {"p_seen": 0.7}})
    assert base.path == "toy/base" and base.backend == "toy" and base.toy.p_seen == 0.7
