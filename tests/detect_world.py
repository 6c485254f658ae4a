"""A small detection world shared by the run-directory tests: a saved tiny model folder (its weights' fingerprint
names the run) and 4 word-problem items with one reference row each, and the detect config composed over it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from configs import compose

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item

Q = "Ann has {a} pens and gets {b} more. How many pens?"


def build_world(root: Path, tok: Any, model: Any) -> Path:
    """Write model/, bench.jsonl and ref.jsonl under `root`; return `root`."""
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    items = [Item(f"q{i}", Q.format(a=i + 10, b=3), str(i + 13)) for i in range(4)]
    refs = [Item(f"q{i}::r0", Q.format(a=i + 40, b=3), str(i + 43), metadata={"original_id": f"q{i}"})
            for i in range(4)]
    save_items(root / "bench.jsonl", items)
    save_items(root / "ref.jsonl", refs)
    return root


def detect_cfg(world: Path, out: Path, *extra: str) -> Any:
    """conf/detect.yaml over the world (p_first/p_all, no logger, output_dir=`out`), plus `extra` overrides."""
    return compose("detect", f"model.path={world / 'model'}", f"data.path={world / 'bench.jsonl'}",
                   f"data.reference_path={world / 'ref.jsonl'}", "data.format=items", "data.name=bench",
                   "logger=none", "run.progress=false", "probe.metrics=[p_first,p_all]", "stats.bootstrap_samples=50",
                   f"output_dir={out}", *extra)
