"""scripts/check_imports.py's inline-config-default rule (`defaults_in`): what it counts as a default written in
code for a config value, and what it leaves alone (result files, schema defaults, derived fallbacks)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def check_imports():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import check_imports
    finally:
        sys.path.pop(0)
    return check_imports


def _hits(check_imports, source: str) -> list[str]:
    return [where.split(": ", 1)[1] for where, _ in check_imports.defaults_in(textwrap.dedent(source))]


def test_counts_defaults_written_for_config_values(check_imports):
    src = """
    def run(cfg, data_cfg):
        a = cfg.get("seed", 0)
        b = getattr(cfg.stats, "test", "permutation")
        c = cfg.data.get("on_overflow") or "error"
        d = to_dict(data_cfg)
        e = d.get("format") or "items"
        f = [cfg.seed] if cfg.get("seeds") is None else cfg.seeds
        g = (cfg.get("run") or {}).get("progress", True)
        h = cfg.run_dir if cfg.get("run_dir") else "none"
        i = cfg.data.on_overflow or "error"
    """
    assert _hits(check_imports, src) == [
        "cfg.get('seed', 0)", "getattr(cfg.stats, 'test', 'permutation')", "cfg.data.get('on_overflow') or 'error'",
        "d.get('format') or 'items'", "[cfg.seed] if cfg.get('seeds') is None else cfg.seeds",
        "(cfg.get('run') or {}).get('progress', True)", "cfg.get('run') or {}",
        "cfg.run_dir if cfg.get('run_dir') else 'none'", "cfg.data.on_overflow or 'error'"]


def test_counts_getter_helpers_and_fallback_statements(check_imports):
    src = """
    def _get(cfg, key, default=None):
        return cfg.get(key, default)

    def load(data_cfg):
        fmt = _get(data_cfg, "format", "items")
        path = _get(data_cfg, "path")
        mode = data_cfg.get("mode")
        if mode is None:
            mode = "offline"
    """
    hits = _hits(check_imports, src)
    assert "_get(data_cfg, 'format', 'items')" in hits and "_get(data_cfg, 'path')" not in hits
    assert any(h.startswith("if mode is None:") for h in hits)


def test_leaves_result_files_schema_defaults_and_derived_values_alone(check_imports):
    src = """
    from zcp.config.schemas import SimulationJob

    def report(summary, rows, job, stored_cfg, self_like):
        a = summary.get("alpha", 0.05)  # a summary.json, not config
        b = [r.get("variant", "original") for r in rows]  # records
        c = stored_cfg.get("seed", SimulationJob.seed)  # the schema's own default
        d = job.model.api.model or job.model.path  # null: derived from another value (the schema's meaning)
        e = [job.seed] if job.seeds is None else job.seeds
        f = job.data.variant_paths or {}  # an empty container: nothing, where an optional mapping is null
        g = job.ref_model.path if job.ref_model is not None else None
    """
    assert _hits(check_imports, src) == []


def test_a_justified_default_names_its_reason(check_imports):
    src = """
    def name(cfg):
        # inline default: a display name for a config without one (no config value has this default)
        return cfg.get("name", "model")
    """
    assert check_imports.defaults_in(textwrap.dedent(src)) == [
        ("4: cfg.get('name', 'model')", "a display name for a config without one (no config value has this default)")]


def test_zcp_outside_the_simulation_reads_its_defaults_from_the_schemas(check_imports):
    """The budget of inline config defaults (<= 5, each justified): zcp/simulate/* is counted by the script,
    in its own work."""
    outside = [(w, why) for w, why in check_imports.inline_defaults() if not w.startswith("zcp/simulate/")]
    assert [w for w, why in outside if why is None] == []
    assert len(outside) <= check_imports.MAX_INLINE_DEFAULTS
