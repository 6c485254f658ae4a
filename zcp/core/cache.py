"""Where zcp keeps what it fetches or converts once per machine (real pretrained models).

One root, `$ZCP_CACHE` if set, else `~/.cache/zcp`; real models live in `<root>/models/<name>/`
(`zcp.backends.real_models` writes them, `${zcp.cache:models/<name>}` in a config points at them). It lives
here, below the config layer, so a config's missing-folder message can name the command that makes it.
"""

from __future__ import annotations

import os
from pathlib import Path

MODELS_SUBDIR = "models"
FETCH_COMMAND = "make real-model"  # what a user runs to get a real model (Makefile target)


def cache_dir() -> Path:
    """The cache root: `$ZCP_CACHE` when set and not empty, else `~/.cache/zcp` (not created here)."""
    env = os.environ.get("ZCP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "zcp"


def cache_path(relative: str) -> str:
    """`<cache root>/<relative>` as text: the `${zcp.cache:...}` config resolver."""
    return str(cache_dir() / relative)


def real_model_name(path: str | os.PathLike[str]) -> str | None:
    """The folder name when `path` is a model folder directly under `<cache root>/models/`, else None."""
    p = Path(path).expanduser()
    try:
        parent = p.parent.resolve()
        models = (cache_dir() / MODELS_SUBDIR).resolve()
    except OSError:
        return None
    return p.name if parent == models and p.name else None
