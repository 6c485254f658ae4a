"""A new benchmark with its own reference builder, added from outside the package (the extension
recipe of docs/extending.md, "A reference builder"): the benchmark is a JSONL file (conf/data/jsonl.yaml reads
it, no code), the builder is a class in this file registered with `register_reference_builder`; the real
build_data job (what evaluate/run_build_data.py runs) then builds its reference set with `reference.method=sums`,
and the detect job's loader (`zcp.probe.datasets.load_datasets`) pairs the originals with those references, on
which ZCP flags a (fake) model that memorised the benchmark.
No zcp/ file is touched.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from configs import compose

from zcp.benchmarks.references.registry import (
    _BUILDERS,
    BuildContext,
    ReferenceSet,
    available_reference_methods,
    register_reference_builder,
)
from zcp.core.items import Item
from zcp.errors import ConfigError


class SumsBuilder:
    """A toy benchmark's exact builder: "What is A + B?" items, references with fresh A, B from the same law."""

    name = "sums"
    law = "exact"
    description = "toy sums: fresh addends from the generator's law"

    def accepts(self, items: Sequence[Item], data_format: str) -> bool:
        return all(it.question.startswith("What is ") for it in items)

    def build(self, items: Sequence[Item], m: int, ctx: BuildContext) -> ReferenceSet:
        rng = random.Random(ctx.seed)
        refs = {}
        for it in items:
            draws = []
            while len(draws) < m:
                a, b = rng.randint(10, 99), rng.randint(10, 99)
                draws.append(Item(f"{it.id}::x", f"What is {a} + {b}?", str(a + b)))
            refs[it.id] = draws
        return ReferenceSet(refs=refs, report={"toy": True})


@pytest.fixture
def sums_builder():
    register_reference_builder(SumsBuilder())
    yield
    _BUILDERS.pop("sums", None)


def _benchmark(path: Path, n: int = 12) -> Path:
    rng = random.Random(1)
    with path.open("w") as f:
        for i in range(n):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            f.write(json.dumps({"id": f"s{i}", "question": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    return path


def _compose(*overrides: str):
    return compose("build_data", "data=jsonl", "logger=none", "paraphrase.k=0", *overrides)


def test_a_benchmark_and_its_builder_from_outside_build_and_load(sums_builder, tmp_path):
    from omegaconf import OmegaConf

    from zcp.benchmarks.build import build_data
    from zcp.config import validate
    from zcp.probe.datasets import load_datasets

    assert "sums" in available_reference_methods()
    bench = _benchmark(tmp_path / "sums.jsonl")
    out = tmp_path / "built"
    cfg = _compose(f"data.path={bench}", "data.reference_path=null", "reference.method=sums", "reference.m=3",
                   f"output_dir={out}")
    validate(cfg, job="build_data")
    build_data(cfg)
    refs = [json.loads(line) for line in (out / "reference.jsonl").read_text().splitlines()]
    assert len(refs) == 12 * 3 and all(r["metadata"]["reference_method"] == "sums" for r in refs)
    report = json.loads((out / "build_report.json").read_text())
    assert json.dumps(report).count('"law": "exact"') >= 1
    # the detect job's loader pairs the benchmark with the built references
    data = OmegaConf.create({**OmegaConf.to_container(_compose(f"data.path={bench}").data, resolve=True),
                             "reference_path": str(out / "reference.jsonl")})
    datasets, _ = load_datasets(data)
    assert sum(len(d.originals) for d in datasets) == 12
    assert all(len(d.reference[it.id]) == 3 for d in datasets for it in d.originals)
    # and ZCP runs on it: a (fake) model that memorised the benchmark's answers is flagged against them
    from fakes import FakeBackend

    from zcp.probe.detect import DetectSettings, detect
    from zcp.probe.prompts import ProbeConfig

    originals = [it for d in datasets for it in d.originals]
    truth = {it.question: it.answer for d in datasets for it in (*d.originals, *(r for rs in d.reference.values() for r in rs))}
    summary = detect(FakeBackend({it.question: it.answer for it in originals}, truth), datasets,
                     ProbeConfig(metrics=("acc", "p_all")), tmp_path / "detect",
                     DetectSettings(bootstrap_samples=999, progress=False))
    by = {r["metric"]: r for r in summary["results"] if r["variant"] == "original"}
    assert by["acc"]["s"] == 1.0 and by["acc"]["s_ref"] == 0.0 and by["acc"]["p_value"] < 0.01


def test_an_unregistered_method_is_refused_in_one_line(tmp_path):
    from zcp.config import validate

    cfg = _compose(f"data.path={_benchmark(tmp_path / 'sums.jsonl')}", "data.reference_path=null",
                   "reference.method=sums")
    with pytest.raises(ConfigError, match=r"reference\.method='sums'"):
        validate(cfg, job="build_data")
