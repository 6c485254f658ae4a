"""Cross-module invariants of the structure: knowledge written in two places must agree.

- the baselines' default detector list (zcp.validate.baselines_config.DEFAULT_DETECTORS) equals
  conf/baselines.yaml's `detectors`, and every name in it is a registered detector;
- the config layer imports no job: importing zcp.config loads nothing of zcp.simulate / zcp.validate and of
  zcp.probe only `stats` (pure functions: the test names `stats.test` may take), `metrics` (the metric table,
  importing nothing of zcp: the names `probe.metrics` may take) and `conventions` (the answer-convention table,
  importing only zcp.core.answers: the names `probe.prefill` may take);
  baselines and calibration register their own roots when their entry point imports them;
- the import graph of zcp/ has no cycle, counting imports inside functions (scripts/check_imports.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]


def test_default_detectors_equal_conf_baselines_yaml():
    from zcp.validate.baselines_config import DEFAULT_DETECTORS
    from zcp.validate.detectors import available_detectors

    conf = OmegaConf.load(REPO / "conf" / "baselines.yaml")
    assert list(conf.detectors) == list(DEFAULT_DETECTORS)
    assert set(DEFAULT_DETECTORS) <= set(available_detectors())


def test_validate_layer_jobs_register_their_roots_and_an_unimported_one_is_named():
    code = ("import zcp.config.schemas as s\n"
            "try:\n    s.job_schema('calibration')\nexcept KeyError as e:\n    print('ERR', e)\n"
            "import zcp.validate.calibration, zcp.validate.baselines\n"
            "print(s.job_schema('calibration').__name__, s.job_schema('baselines').__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert "ERR" in out and "zcp.validate.calibration" in out  # the message names the module to import
    assert "CalibrationJob BaselinesConfig" in out


def test_config_layer_imports_no_higher_layer():
    code = ("import sys\nimport zcp.config, zcp.config.schemas\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('zcp.probe', 'zcp.simulate', 'zcp.validate'))\n"
            "             and m not in ('zcp.probe', 'zcp.probe.stats', 'zcp.probe.metrics', 'zcp.probe.conventions'))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]", out


def test_no_import_cycle():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import check_imports
    finally:
        sys.path.pop(0)
    assert check_imports.cycles(check_imports.graph()) == []


def test_the_leak_line_is_the_probes_prefill_plus_the_answer():
    """What the simulation trains on (the answer-only completion, a CoT completion's last line, the GRPO format
    reward's line) is the zero-CoT probe's default pre-fill, then the answer, then the answer's end the probe
    scores; the generated benchmark's solutions end on the same line."""
    from zcp.benchmarks.wordproblems import generate_word_problems
    from zcp.core.answers import final_answer_line
    from zcp.probe.probe_config import ProbeGroupConfig
    from zcp.probe.prompts import ZERO_COT_PREFIX, answer_end
    from zcp.simulate.data import answer_completion, cot_completion
    from zcp.simulate.rewards import answer_line

    prefill = ProbeGroupConfig().zero_cot_prefix
    assert prefill == ZERO_COT_PREFIX
    line = final_answer_line("42")
    assert line.startswith(prefill) and line[len(prefill):].startswith("42" + answer_end(prefill))
    assert answer_completion("42").strip() == line == answer_line("42")
    item = generate_word_problems(3, seed=1)[0]
    assert item.solution.strip().splitlines()[-1] == final_answer_line(item.answer)
    assert cot_completion(item.solution, item.answer).strip().splitlines()[-1] == final_answer_line(item.answer)
