"""Weights & Biases logging: one small wrapper so every run logs the same way.

`logger.mode` is `offline` by default (nothing leaves the machine; `wandb sync` later), `disabled`
in tests (also forced by WANDB_MODE=disabled), `online` when the user asks. `logger=none` turns it off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class Tracker:
    """A W&B run, or a no-op when logging is off. Always call `finish()` (or use as a context)."""

    def __init__(self, cfg: Mapping[str, Any] | None, *, run_config: Mapping[str, Any] | None = None,
                 run_dir: str | None = None, job_type: str = "run", name: str | None = None) -> None:
        cfg = dict(cfg or {})
        if os.environ.get("WANDB_MODE") == "":  # an empty value makes wandb itself fail
            os.environ.pop("WANDB_MODE")
        mode = os.environ.get("WANDB_MODE") or cfg.get("mode", "offline")
        self.enabled = bool(cfg.get("enabled", True)) and mode != "disabled"
        self.run = None
        if not self.enabled:
            return
        import wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=cfg.get("project", "zcp"),
            entity=cfg.get("entity"),
            group=cfg.get("group"),
            tags=list(cfg.get("tags") or []),
            mode=mode,
            dir=run_dir,
            job_type=job_type,
            name=name,
            config=dict(run_config or {}),
            reinit="finish_previous",
        )

    def log(self, data: Mapping[str, Any], step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(dict(data), step=step)

    def table(self, key: str, rows: list[Mapping[str, Any]]) -> None:
        """Log a list of flat dicts as a W&B table."""
        if self.run is None or not rows:
            return
        columns = list(rows[0].keys())
        self.run.log({key: self._wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])})

    def image(self, key: str, path: str) -> None:
        if self.run is not None:
            self.run.log({key: self._wandb.Image(path)})

    def summary(self, data: Mapping[str, Any]) -> None:
        if self.run is not None:
            for k, v in data.items():
                self.run.summary[k] = v

    def artifact(self, name: str, type_: str, paths: list[str]) -> None:
        """Attach files (records, summaries, adapters) as a W&B artifact."""
        if self.run is None:
            return
        art = self._wandb.Artifact(name=name, type=type_)
        for p in paths:
            if os.path.isdir(p):
                art.add_dir(p)
            elif os.path.exists(p):
                art.add_file(p)
        self.run.log_artifact(art)

    def finish(self) -> None:
        """End the run; required between runs in one process."""
        if self.run is not None:
            self.run.finish()
            self.run = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
