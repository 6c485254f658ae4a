"""What an entry point prints: the job's own lines, not its libraries'.

The main job's console is meant to read as a report: the stage lines, the progress bars and the final tables.
Left alone, the libraries under it print around those: W&B's banner at every run start and its run-history
sparklines and summary at every finish, transformers/TRL/PEFT deprecation FutureWarnings and advisory notices,
datasets' and tokenizers' logger warnings. On the reduced demo that was most of what a newcomer saw.

This module is the one place that policy lives. `zcp.config.one_line_errors` applies it, and only in the
entry-point process (the decorated function is a script's `main`), never on import: a notebook or a program that
imports zcp keeps every library's defaults. `-v` / `--verbose` on any entry point (taken out of argv before Hydra
parses it, `take_verbose_flag`) or the override `logger.verbose=true` leaves the libraries as they are.

Quiet means:
- W&B: `WANDB_SILENT=true` (no banner, no run history or summary, no "URL not available" warnings); what W&B
  records (metrics, tables, artifacts, the captured console) is unchanged.
- transformers, datasets and the other libraries in `LIBRARIES`: their loggers at ERROR (the environment
  variables `TRANSFORMERS_VERBOSITY` / `DATASETS_VERBOSITY` too, for a library imported later) and the
  transformers advisory warnings off.
- Python warnings: FutureWarning and DeprecationWarning (API notices addressed to developers) and every warning
  raised from a module of `LIBRARIES` are ignored; warnings raised from zcp's own modules still show.
- Progress bars are kept (they are tqdm, not logging), and so are zcp's own log lines and prints.

A variable the user has already set in the environment (e.g. `WANDB_SILENT=false`) is left as they set it.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import MutableSequence

LIBRARIES: tuple[str, ...] = ("transformers", "trl", "peft", "datasets", "accelerate", "huggingface_hub", "tokenizers",
                              "torch", "bitsandbytes", "vllm")
"""Packages whose log records below ERROR and whose Python warnings are kept off the console unless verbose.
(W&B is not among them: `WANDB_SILENT` quiets its console, and its logger also feeds the run's debug.log.)"""

_VERBOSITY_ENV: dict[str, str] = {"transformers": "TRANSFORMERS_VERBOSITY", "datasets": "DATASETS_VERBOSITY"}
"""A library whose own verbosity variable the user has set keeps the level they asked for."""

VERBOSE_FLAGS: tuple[str, ...] = ("-v", "--verbose")
"""Command-line flags every entry point accepts (not Hydra's: they are removed before Hydra parses argv)."""

QUIET_ENV: dict[str, str] = {
    "WANDB_SILENT": "true",
    "TRANSFORMERS_VERBOSITY": "error",
    "DATASETS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}
"""Environment variables set (where unset) when quiet; read by each library when it is first set up."""

_QUIETED = False


def take_verbose_flag(argv: MutableSequence[str]) -> bool:
    """Remove every `-v` / `--verbose` from `argv` (in place) and say whether there was one.

    Called on `sys.argv` before Hydra parses it, which would refuse an argument it does not know. Only whole
    arguments count: an override such as `name=-v` is left alone.
    """
    found = False
    for i in range(len(argv) - 1, 0, -1):  # argv[0] is the program
        if argv[i] in VERBOSE_FLAGS:
            del argv[i]
            found = True
    return found


def quiet_libraries(verbose: bool) -> bool:
    """Keep library noise off the console of this process unless `verbose`; returns whether it is quiet now.

    Idempotent (a Hydra multirun calls it once per job). `verbose=True` changes nothing: the libraries keep
    their own defaults. Meant for the entry-point process only (see the module docstring): it sets process-wide
    warning filters, logger levels and environment variables.
    """
    global _QUIETED
    if verbose:
        return _QUIETED
    if _QUIETED:
        return True
    user_set = {key for key in QUIET_ENV if key in os.environ}
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    for name in LIBRARIES:
        if _VERBOSITY_ENV.get(name) not in user_set:
            logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    for name in LIBRARIES:
        warnings.filterwarnings("ignore", module=rf"{name}(\.|$)")
    _QUIETED = True
    return True
