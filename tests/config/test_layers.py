"""scripts/check_imports.py's layer order: `--strict` refuses an import of a higher layer, at module level or
inside a function, and the package as it stands imports no higher layer."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from zcp import REPO_ROOT


@pytest.fixture(scope="module")
def check_imports():
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        return importlib.import_module("check_imports")
    finally:
        sys.path.remove(str(REPO_ROOT / "scripts"))


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A package `zcp` under `root` holding `files` (path -> source), every folder a package."""
    for rel, src in files.items():
        path = root / "zcp" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(src), encoding="utf-8")
    for d in [root / "zcp", *(p for p in (root / "zcp").rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    return root / "zcp"


CLEAN = {
    "errors.py": "class ConfigError(ValueError): ...\n",
    "core/items.py": "from zcp.errors import ConfigError\n",
    "config/groups.py": "from zcp.core.items import ConfigError\n",
    "probe/metrics.py": "NAMES = ('acc',)\nfrom zcp.config.groups import ConfigError\n",
    "validate/study.py": "from zcp.probe.metrics import NAMES\n",
}


def _strict(check_imports, monkeypatch, pkg: Path, capsys) -> tuple[int, str]:
    monkeypatch.setattr(check_imports, "ROOT", pkg.parent)
    monkeypatch.setattr(check_imports, "PKG", pkg)
    rc = check_imports.main(["--strict"])
    return rc, capsys.readouterr().out


def test_strict_passes_a_tree_whose_imports_go_down(check_imports, monkeypatch, tmp_path, capsys):
    rc, out = _strict(check_imports, monkeypatch, _tree(tmp_path, CLEAN), capsys)
    assert rc == 0, out
    assert "upward imports" in out and ": 0" in out.split("upward imports", 1)[1].splitlines()[0]


@pytest.mark.parametrize("source", [
    "from zcp.probe.metrics import NAMES\n",  # module level
    "def names():\n    from zcp.probe import metrics\n\n    return metrics.NAMES\n",  # inside a function
    "def names():\n    import zcp.probe.metrics\n\n    return zcp.probe.metrics.NAMES\n",
])
def test_strict_refuses_one_upward_import(check_imports, monkeypatch, tmp_path, capsys, source):
    files = dict(CLEAN)
    files["config/groups.py"] = CLEAN["config/groups.py"] + source
    rc, out = _strict(check_imports, monkeypatch, _tree(tmp_path, files), capsys)
    assert rc == 1
    assert "zcp.config.groups -> zcp.probe.metrics (layer 2 -> 5)" in out
    # without --strict the report is the same and the exit status 0
    assert check_imports.main([]) == 0


def test_relative_upward_import_is_seen(check_imports, tmp_path):
    files = dict(CLEAN)
    files["benchmarks/shift.py"] = "def f():\n    from ..probe.metrics import NAMES\n\n    return NAMES\n"
    g = check_imports.graph(_tree(tmp_path, files))
    assert check_imports.upward_imports(g) == [("zcp.benchmarks.shift", "zcp.probe.metrics", 4, 5)]


def test_a_package_outside_every_layer_is_refused(check_imports, monkeypatch, tmp_path, capsys):
    files = dict(CLEAN)
    files["plugins/thing.py"] = "X = 1\n"
    rc, out = _strict(check_imports, monkeypatch, _tree(tmp_path, files), capsys)
    assert rc == 1 and "zcp.plugins.thing" in out


def test_layers_are_the_documented_order(check_imports):
    assert [check_imports.layer(m) for m in ("zcp.errors", "zcp.core.io", "zcp.config.checks", "zcp.backends.hf",
                                             "zcp.benchmarks.loaders", "zcp.probe.stats", "zcp.simulate.sft",
                                             "zcp.validate.baselines")] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert check_imports.layer("zcpx.core") is None


def test_the_package_imports_no_higher_layer(check_imports):
    """zcp/ as it stands: no upward import (function-level ones included), every module inside a layer."""
    g = check_imports.graph()
    assert check_imports.upward_imports(g) == []
    assert check_imports.unlayered(g) == []
    assert check_imports.cycles(g) == []


def test_schemas_register_beside_their_owners():
    """Each job's root and each stored group is registered by the module beside its owner, none of them in the
    config layer's own modules but the mechanics' groups (model, run) and the roots that need no higher layer."""
    from zcp.config.groups import SCHEMAS, STORED
    from zcp.config.jobs import JOBS

    owners = {name: root.__module__ for name, root in JOBS.items() if isinstance(root, type)}
    assert owners["detect"] == "zcp.probe.probe_config"
    assert owners["build_data"] == "zcp.benchmarks.data_config"
    assert owners["contaminate"] == owners["demo"] == "zcp.simulate.simulation_config"
    assert owners["pretrain_base"] == "zcp.simulate.train_config"
    assert owners["ablations"] == owners["report"] == "zcp.validate.study_config"
    in_config = sorted(g for g, node in [*SCHEMAS.items(), *((g, n) for (g, _), n in STORED.items())]
                       if node.__module__.startswith("zcp.config"))
    assert in_config == ["model", "run"]
