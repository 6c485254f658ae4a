"""Run a Python script with every write into one directory recorded per rank (the multi-process launch tests).

    ZCP_AUDIT_DIR=LOGS ZCP_AUDIT_ROOT=RUN_DIR accelerate launch ... tests/simulate/rank_audit.py SCRIPT ARGS...

Each process appends to LOGS/rank<RANK>.jsonl one JSON line per write event under RUN_DIR, seen through a
`sys.addaudithook` hook (opens for writing, renames, mkdir, removals) and every `wandb.init` it calls (with its
job_type), then runs SCRIPT as `__main__` with ARGS. What the hook cannot see: files written by native code that
opens them itself (safetensors' Rust writer, torch's C++ zip writer), which are then seen at their atomic rename
(the pipeline saves models and adapters through a temporary folder) or not at all (trainer checkpoints).
"""

from __future__ import annotations

import json
import os
import runpy
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {"os.rename": 2, "os.mkdir": 1, "os.remove": 1, "os.rmdir": 1, "shutil.rmtree": 1,
                "shutil.copyfile": 2, "shutil.move": 2, "os.symlink": 2, "os.link": 2}


def main() -> None:
    """Install the hook, patch `wandb.init`, and run the script named by argv[1] as `__main__`."""
    logs, root = os.environ["ZCP_AUDIT_DIR"], os.path.realpath(os.environ["ZCP_AUDIT_ROOT"])
    rank = os.environ.get("RANK", "0")
    os.makedirs(logs, exist_ok=True)
    # open for the life of the process, and before the hook exists (its own writes are not recorded)
    out = open(os.path.join(logs, f"rank{rank}.jsonl"), "a", buffering=1)  # noqa: SIM115

    def record(event: str, path: object) -> None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return
        p = os.path.realpath(os.fspath(path))
        if p == root or p.startswith(root + os.sep):
            out.write(json.dumps({"event": event, "path": os.path.relpath(p, root)}) + "\n")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, _, flags = args
            if isinstance(flags, int) and flags & _WRITE_FLAGS:
                record(event, path)
        elif event in _PATH_EVENTS:
            record(event, args[_PATH_EVENTS[event] - 1])

    import wandb

    init = wandb.init

    def audited_init(*a: object, **k: object) -> object:
        out.write(json.dumps({"event": "wandb.init", "job_type": k.get("job_type"), "dir": str(k.get("dir"))}) + "\n")
        return init(*a, **k)

    wandb.init = audited_init
    sys.addaudithook(hook)
    script, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
