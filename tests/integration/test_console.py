"""zcp.core.console: an entry point's console shows the job's lines, not its libraries' noise, unless `-v`.

Why: the main job's console is meant to read as a report. Without the policy, every W&B run prints a
banner and a run summary, and transformers/PEFT print deprecation FutureWarnings around the tables. The policy
must apply in the entry-point process only (a library user keeps the libraries' defaults), and `-v` must bring
everything back, so a user can still see what a library had to say.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zcp.config import asset_path, one_line_errors
from zcp.core.console import take_verbose_flag

REPO = Path(__file__).resolve().parents[2]
PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")  # a line of Python's warnings formatter ("file:line: Cat: msg")


def test_take_verbose_flag_removes_only_whole_flags():
    argv = ["run.py", "-v", "name=-v", "logger=none", "--verbose"]
    assert take_verbose_flag(argv) is True
    assert argv == ["run.py", "name=-v", "logger=none"]
    assert take_verbose_flag(argv) is False and argv == ["run.py", "name=-v", "logger=none"]
    prog = ["-v"]  # argv[0] is the program, never a flag
    assert take_verbose_flag(prog) is False and prog == ["-v"]


def test_one_line_errors_leaves_a_library_callers_process_alone(monkeypatch):
    """Decorating a function that is not a script's main neither edits sys.argv nor quiets anything."""
    monkeypatch.setattr(sys, "argv", ["prog", "-v"])
    monkeypatch.delenv("WANDB_SILENT", raising=False)

    @one_line_errors
    def job() -> str:
        return "ran"

    assert job() == "ran"
    assert sys.argv == ["prog", "-v"] and "WANDB_SILENT" not in os.environ


_POLICY = textwrap.dedent("""
    import logging, os, sys, types, warnings
    from zcp.core.console import quiet_libraries

    def module(name):
        m = types.ModuleType(name)
        exec("import logging, warnings\\n"
             "def say(cat):\\n"
             "    warnings.warn(__name__ + ' warns', cat)\\n"
             "    logging.getLogger(__name__).warning(__name__ + ' logs')\\n", m.__dict__)
        return m

    logging.basicConfig(format="%(message)s")
    print("quiet", quiet_libraries(sys.argv[1] == "verbose"), quiet_libraries(sys.argv[1] == "verbose"))
    module("transformers.modeling_utils").say(FutureWarning)
    module("peft.tuners").say(UserWarning)
    module("zcp.probe.detect").say(UserWarning)
    print("WANDB_SILENT", os.environ.get("WANDB_SILENT"), "TRANSFORMERS_VERBOSITY",
          os.environ.get("TRANSFORMERS_VERBOSITY"))
""")


def _policy(mode: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("WANDB_SILENT", "TRANSFORMERS_VERBOSITY")}
    res = subprocess.run([sys.executable, "-c", _POLICY, mode], capture_output=True, text=True, cwd=REPO,
                         env={**base, **env}, timeout=120, check=True)
    return res.stdout + res.stderr


def test_quiet_libraries_keeps_library_warnings_and_notices_off_and_zcp_messages_on():
    out = _policy("quiet")
    assert "quiet True True" in out  # idempotent
    assert "transformers.modeling_utils" not in out and "peft.tuners" not in out
    assert "zcp.probe.detect warns" in out and "zcp.probe.detect logs" in out
    assert "WANDB_SILENT true TRANSFORMERS_VERBOSITY error" in out


def test_quiet_libraries_verbose_changes_nothing_and_a_users_setting_wins():
    out = _policy("verbose")
    assert "quiet False False" in out
    for name in ("transformers.modeling_utils", "peft.tuners", "zcp.probe.detect"):
        assert f"{name} warns" in out and f"{name} logs" in out, name
    assert "WANDB_SILENT None" in out
    mine = _policy("quiet", WANDB_SILENT="false", TRANSFORMERS_VERBOSITY="info")
    assert "WANDB_SILENT false TRANSFORMERS_VERBOSITY info" in mine


# evaluate/run_detect.py as a user runs it, in a process that also raises a library FutureWarning and a library
# notice mid-job (the shipped libraries' own deprecations come and go with their versions; these do not).
_ENTRY = textwrap.dedent("""
    import runpy, sys, types
    import zcp.probe.run as job

    lib = types.ModuleType("transformers.generation.utils")
    exec("import logging, warnings\\n"
         "def say():\\n"
         "    warnings.warn('zcp-test library deprecation', FutureWarning)\\n"
         "    logging.getLogger(__name__).warning('zcp-test library notice')\\n", lib.__dict__)
    run_detect = job.run_detect

    def noisy(cfg):
        lib.say()
        return run_detect(cfg)

    job.run_detect = noisy
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


@pytest.fixture(scope="module")
def detect_inputs(tmp_path_factory):
    """Four items, one reference row each, and a LoRA adapter over the shipped base model (loading it with PEFT is
    where today's transformers raises a real FutureWarning)."""
    if not Path(asset_path("base_model"), "model.safetensors").exists():
        pytest.skip("the shipped base model is not built")
    from zcp.benchmarks.loaders import save_items
    from zcp.core.items import Item
    from zcp.simulate.sft import load_model, lora_config

    root = tmp_path_factory.mktemp("console")
    people = [("Ann", 12, 5), ("Bob", 20, 3), ("Cara", 7, 8), ("Dan", 30, 10)]
    q = "{} has {} pens and gets {} more. How many pens does {} have now?"
    save_items(root / "data.jsonl", [Item(f"q{i}", q.format(n, a, b, n), str(a + b)) for i, (n, a, b) in enumerate(people)])
    save_items(root / "ref.jsonl", [Item(f"q{i}::ref0", q.format(n, a + 1, b, n), str(a + b + 1),
                                         metadata={"original_id": f"q{i}"}) for i, (n, a, b) in enumerate(people)])
    from peft import get_peft_model

    get_peft_model(load_model(asset_path("base_model")), lora_config(r=2)).save_pretrained(root / "adapter")
    return root


def _detect(root: Path, out: Path, *flags: str) -> tuple[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "TRANSFORMERS_VERBOSITY"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")  # a tiny model: one thread is as fast and does not thrash
    cmd = [sys.executable, "-c", _ENTRY, str(REPO / "evaluate" / "run_detect.py"), *flags,
           f"model.path={asset_path('base_model')}", f"model.adapter={root / 'adapter'}",
           f"data.path={root / 'data.jsonl'}", f"data.reference_path={root / 'ref.jsonl'}", "logger.mode=offline",
           "probe.metrics=[p_all]", f"output_dir={out}"]  # log-probs only: no generation needed
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent, env=env, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    return res.stdout + res.stderr, (res.stdout + res.stderr).splitlines()


@pytest.mark.slow  # ~35 s: two entry-point runs; make test-all
def test_entry_point_console_without_and_with_verbose(detect_inputs, tmp_path):
    text, lines = _detect(detect_inputs, tmp_path / "quiet")
    assert not [x for x in lines if x.startswith("wandb:")], text
    assert not [x for x in lines if PY_WARNING.match(x) or "FutureWarning" in x], text
    assert "zcp-test library notice" not in text
    assert "| custom | original | 4 |" in text and "wrote " in text  # the job's own report is all there
    assert list((tmp_path / "quiet" / "wandb").glob("offline-run-*")), "W&B still records the run"

    text_v, lines_v = _detect(detect_inputs, tmp_path / "verbose", "-v")
    assert any(x.startswith("wandb: Tracking run") for x in lines_v), text_v
    assert any(x.startswith("wandb: Run summary") for x in lines_v), text_v
    assert any(PY_WARNING.match(x) and "FutureWarning: zcp-test library deprecation" in x for x in lines_v), text_v
    assert "zcp-test library notice" in text_v
    assert "| custom | original | 4 |" in text_v


@pytest.mark.parametrize(("config", "overrides"), [("detect", []), ("detect", ["logger=none"]), ("demo", []),
                                                   ("arithmark", [])])
def test_logger_verbose_is_a_typed_override_of_every_logger(config, overrides):
    """`logger.verbose=true` (the Hydra spelling of -v) composes on every shipped logger and validates."""
    from configs import compose

    from zcp.config import validate

    cfg = compose(config, *overrides, "logger.verbose=true")
    assert validate(cfg, job=config)["logger"].verbose is True
