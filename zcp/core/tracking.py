"""Weights & Biases logging: one small wrapper so every run logs the same way.

`logger.mode` is `offline` by default (nothing leaves the machine; `wandb sync` later), `disabled`
in tests (also forced by WANDB_MODE=disabled), `online` when the user asks. `logger=none` turns it off.

The `logger` group's schema, LoggerConfig, lives here beside the tracker that reads it (zcp.config.groups
re-exports it and checks it with every job), so its defaults are defined once, in the dataclass.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from zcp.errors import ConfigError

LOGGER_MODES = ("online", "offline", "disabled")


@dataclass
class LoggerConfig:
    """The `logger` group (conf/logger/*.yaml): Weights & Biases (zcp.core.tracking)."""

    enabled: bool = True
    mode: str = "offline"  # online | offline | disabled (WANDB_MODE=disabled wins)
    project: str = "zcp"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    log_records: bool = False  # per-item records include reference-set answers, the auditor's private asset
    verbose: bool = False  # true (or -v): library output (W&B banners, warnings) on the console (zcp.core.console)

    def __post_init__(self) -> None:
        if self.mode not in LOGGER_MODES:
            raise ConfigError(f"logger.mode={self.mode!r}: must be online, offline or disabled")


def logger_config(cfg: LoggerConfig | Mapping[str, Any] | None) -> LoggerConfig:
    """The checked LoggerConfig of a `logger` config (a validated instance, a mapping, or None: the defaults)."""
    if isinstance(cfg, LoggerConfig):
        return cfg
    values = dict(cfg or {})
    known = {f.name for f in fields(LoggerConfig)}
    unknown = sorted(str(k) for k in values if k not in known)
    if unknown:
        raise ConfigError(f"logger: unknown key(s) {unknown}; known: {sorted(known)}")
    return LoggerConfig(**values)


class Tracker:
    """A W&B run, or a no-op when logging is off. Always call `finish()` (or use as a context)."""

    def __init__(self, cfg: LoggerConfig | Mapping[str, Any] | None, *, run_config: Mapping[str, Any] | None = None,
                 run_dir: str | None = None, job_type: str = "run", name: str | None = None) -> None:
        settings = logger_config(cfg)
        if os.environ.get("WANDB_MODE") == "":  # an empty value makes wandb itself fail
            os.environ.pop("WANDB_MODE")
        mode = os.environ.get("WANDB_MODE") or settings.mode
        self.enabled = bool(settings.enabled) and mode != "disabled"
        self.run = None
        if not self.enabled:
            return
        import wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            group=settings.group,
            tags=list(settings.tags),
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
