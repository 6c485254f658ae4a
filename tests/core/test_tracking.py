"""W&B wrapper: disabled is a no-op; offline writes a local run with tables and a summary."""

import pytest

from zcp.core.tracking import Tracker


def test_disabled_is_noop(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with Tracker({"mode": "offline"}) as t:
        assert t.run is None
        t.log({"x": 1})
        t.table("t", [{"a": 1}])


def test_logger_none_config_is_noop(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with Tracker({"enabled": False, "mode": "disabled"}) as t:
        assert t.run is None


def test_offline_run_writes_local_files(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    t = Tracker({"mode": "offline", "project": "zcp-test"}, run_config={"seed": 3}, run_dir=str(tmp_path))
    assert t.run is not None and t.run.config["seed"] == 3
    t.table("results", [{"metric": "p_all", "c_cont": 0.99}])
    t.summary({"C/p_all/c_cont": 0.99})
    t.finish()
    assert list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert t.run is None
