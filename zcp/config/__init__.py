"""Hydra/OmegaConf glue shared by entry points: resolvers, run directories, model loading."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from zcp import ASSETS
from zcp.config.model import check_model_path  # noqa: F401  (re-exported)
from zcp.config.schemas import register_schemas, validate  # noqa: F401  (re-exported for entry points)
from zcp.core.cache import cache_path
from zcp.core.io import stable_hash
from zcp.errors import ConfigError


def asset_path(name: str) -> str:
    """Path of a file or folder shipped in zcp/assets (e.g. the embedded base model)."""
    return str(ASSETS / name)


def register_resolvers() -> None:
    """`${zcp.asset:base_model}` in configs points at the shipped files, `${zcp.cache:models/NAME}` at zcp's cache
    (`$ZCP_CACHE`, else ~/.cache/zcp: real models converted by `make real-model`)."""
    if not OmegaConf.has_resolver("zcp.asset"):
        OmegaConf.register_new_resolver("zcp.asset", asset_path)
    if not OmegaConf.has_resolver("zcp.cache"):
        OmegaConf.register_new_resolver("zcp.cache", cache_path)


register_resolvers()
register_schemas()


def user_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean a user mistake (bad file, row, field, config value, busy run directory)."""
    from zcp.errors import DataError, RunDirError

    return (DataError, ConfigError, RunDirError)


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Entry-point decorator: a user mistake exits with status 2 and one line on stderr, no traceback.

    File-system errors a user can act on (a full disk, a read-only or forbidden folder: `zcp.core.io.FS_ERRNOS`) are
    one line too, naming the path and the errno (`zcp.core.io.fs_error_message`), wherever they happen (a record
    appended mid-run, a trainer's checkpoint: `zcp.core.io.as_write_error` names the path of writes that fail
    without one). Real bugs keep their full traceback; `HYDRA_FULL_ERROR=1` shows it for user mistakes too.

    On a script's `main` (defined in `__main__`) it also sets the console policy (`zcp.core.console`): `-v` /
    `--verbose` is taken out of sys.argv here, before Hydra parses it, and unless it or `logger.verbose=true` was
    given, library noise (W&B banners and run summaries, transformers/TRL/PEFT warnings) is kept off the console.
    """
    from zcp.core.console import quiet_libraries, take_verbose_flag
    from zcp.core.io import fs_error_message

    entry = getattr(fn, "__module__", None) == "__main__"  # only an entry-point process, never a library caller
    verbose_flag = take_verbose_flag(sys.argv) if entry else False
    if entry:  # Hydra's compose errors (a misspelt key without +) in one line, a -m sweep validated up front
        from zcp.config.entry import guard_hydra_entry

        guard_hydra_entry()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if entry:
            quiet_libraries(verbose_flag or _asks_verbose(args[0] if args else None))
        try:
            return fn(*args, **kwargs)
        except user_errors() as e:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
            sys.exit(2)
        except OSError as e:
            msg = fs_error_message(e)
            if msg is None or os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"error: {' '.join(msg.split())}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def _asks_verbose(cfg: Any) -> bool:
    """Whether an entry point's config sets `logger.verbose` (a job without a `logger` group never does)."""
    logger = cfg.get("logger") if isinstance(cfg, (DictConfig, dict)) else None
    return bool(logger.get("verbose")) if isinstance(logger, (DictConfig, dict)) else False


def to_dict(cfg: Any) -> dict[str, Any]:
    """Resolved plain-dict copy of a config (for W&B and JSON)."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return dict(cfg)


def run_dir(cfg: DictConfig, kind: str, *parts: str, extra: dict[str, Any] | None = None) -> Path:
    """`cfg.output_dir` if set, else outputs/<kind>/<parts>__<hash of the resolved config and `extra`>.

    The default is a pure function of the configuration (and of `extra`, e.g. the model's content
    fingerprint), so rerunning the same command finds the same directory and resumes.
    """
    if cfg.get("output_dir"):
        return Path(str(cfg.output_dir))
    d = to_dict(cfg)
    d.pop("output_dir", None)
    d.pop("logger", None)
    if extra:
        d["__extra__"] = extra
    h = stable_hash(json.dumps(d, sort_keys=True, default=str), 8)
    name = "__".join(p.replace("/", "_") for p in parts if p) or kind
    return Path("outputs") / kind / f"{name}__{h}"


def save_config(cfg: DictConfig, out_dir: Path) -> Path:
    """Write the resolved config as YAML into the run directory."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "config.yaml"
    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return path


def model_name(model_cfg: Any) -> str:
    """`model.name`, else (model.backend=openai) `model.api.model`, else the last component of `model.path`
    (zcp.config.model.ModelConfig.display_name, of a `model` config, a checked ModelConfig or None)."""
    from zcp.config.model import model_config

    return model_config(model_cfg).display_name()
