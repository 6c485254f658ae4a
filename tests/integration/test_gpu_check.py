"""scripts/gpu_check.sh and its helper scripts/gpu_check.py, without a GPU.

The check itself needs one (docs/gpu_check.md); here: the shell script's syntax (bash -n, shellcheck when
installed), the dry run (every command printed, one JSON with every step marked "dry-run", nothing heavy run),
a run with no step selected (the real bookkeeping path), the report's statuses for timeouts and failures, and
the helper's step functions at toy size on the CPU where they can run there (step 1's comparison with both
sides fp32 on the CPU gives diff 0; the GPU steps say why they are skipped).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"


def _load_helper():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


gc = _load_helper()


def _sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_shell_script_parses():
    res = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_shellcheck_is_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    res = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dry_run_prints_every_command_and_writes_one_json_of_dry_run_steps(tmp_path):
    out, work = tmp_path / "check.json", tmp_path / "work"
    res = _sh("--dry-run", "--python", sys.executable, "--workdir", str(work), "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["mode"] == "dry-run"
    assert doc["step_order"] == list(gc.STEPS)
    assert list(doc["steps"]) == list(gc.STEPS)
    assert {s["status"] for s in doc["steps"].values()} == {"dry-run"}
    assert doc["status_counts"] == {"dry-run": len(gc.STEPS)}
    for name, step in doc["steps"].items():
        assert step["command"], name
        if name != "install":  # each step is one call of the helper, under a time limit
            assert f"gpu_check.py step {name} " in step["command"]
            assert step["command"].startswith("timeout ")
            assert f"[{name}, <= " in res.stdout
    assert "pip install" in doc["steps"]["install"]["command"] and "vllm" in doc["steps"]["install"]["command"]
    # nothing heavy ran: no model, no log, no per-step result, only the list of commands
    assert sorted(p.name for p in work.iterdir()) == ["commands.tsv"]


def test_run_with_no_step_selected_records_every_step_as_skipped(tmp_path):
    out, work = tmp_path / "check.json", tmp_path / "work"
    res = _sh("--no-install", "--steps", "nothing", "--python", sys.executable, "--workdir", str(work),
              "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["mode"] == "run"
    assert {s["status"] for s in doc["steps"].values()} == {"skipped"}
    assert "--no-install" in doc["steps"]["install"]["reason"]
    assert doc["steps"]["demo_gpu"]["reason"] == "not selected (--steps nothing)"
    assert doc["within_time_limit"] is True


def test_report_tells_timeouts_failures_and_steps_that_never_ran(tmp_path):
    (tmp_path / "steps").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "status.tsv").write_text("environment\t0\t3\nprepare\t124\t60\nhf_bf16_vs_cpu_fp32\t1\t5\n")
    (tmp_path / "steps" / "environment.json").write_text(json.dumps({"status": "ok", "figures": {"python": "3"}}))
    (tmp_path / "logs" / "hf_bf16_vs_cpu_fp32.log").write_text("Traceback\nRuntimeError: CUDA error\n")
    doc = gc.report(tmp_path, tmp_path / "out.json", total_s=68, budget_s=470)
    steps = doc["steps"]
    assert steps["environment"]["status"] == "ok" and steps["environment"]["seconds"] == 3
    assert steps["prepare"]["status"] == "timeout" and steps["prepare"]["exit_code"] == 124
    assert steps["hf_bf16_vs_cpu_fp32"]["status"] == "error"
    assert steps["hf_bf16_vs_cpu_fp32"]["log_tail"][-1] == "RuntimeError: CUDA error"
    assert steps["demo_gpu"]["status"] == "error" and "never ran" in steps["demo_gpu"]["error"]
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(json.dumps(doc, default=str))


def _result(lps, tokens=None):
    from zcp.backends.base import ScoreResult

    return ScoreResult(token_logprobs=tuple(lps), tokens=tuple(tokens or [str(i) for i in range(len(lps))]))


def test_compare_scores_measures_log_prob_p_first_and_p_all_differences():
    import math

    a = [_result([-0.1, -0.2]), _result([-1.0])]
    b = [_result([-0.1, -0.5]), _result([-1.5])]
    fig = gc.compare_scores(a, b)
    assert fig["requests"] == 2 and fig["scored_tokens"] == 3 and fig["same_tokens"]
    assert fig["abs_logp_diff"]["max"] == pytest.approx(0.5)
    assert fig["abs_logp_diff"]["mean"] == pytest.approx((0.0 + 0.3 + 0.5) / 3)
    assert fig["abs_p_first_diff"]["max"] == pytest.approx(math.exp(-1.0) - math.exp(-1.5))
    assert fig["abs_p_all_diff"]["max"] == pytest.approx(max(math.exp(-0.15) - math.exp(-0.3),
                                                             math.exp(-1.0) - math.exp(-1.5)))
    assert not gc.compare_scores([_result([-0.1], ["x"])], [_result([-0.1], ["y"])])["same_tokens"]


def test_compare_generations_counts_equal_answers_not_only_equal_texts():
    fig = gc.compare_generations(["42}", "7 }", "5}"], ["42}", "7}", "6}"])
    assert fig["identical_text"] == 1 and fig["identical_answer"] == 2
    assert fig["agreement"] == pytest.approx(2 / 3)
    assert fig["first_differences"][0] == {"a": "7 }", "b": "7}"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    work = tmp_path_factory.mktemp("gpu_check")
    res = gc.prepare(work, specs={"tiny": {"hidden": 32, "layers": 1, "heads": 2}}, n_items=8, train_steps=2,
                     device="cpu", vocab_size=300)
    return work, res


def test_prepare_builds_the_models_locally(toy):
    work, res = toy
    assert res["status"] == "ok"
    tiny = res["figures"]["models"]["tiny"]
    assert tiny["head_dim"] == 16 and tiny["train_steps"] == 2
    assert (work / "models" / "tiny" / "config.json").is_file()
    assert (work / "models" / "tiny" / "tokenizer.json").is_file()
    assert len(gc.load_items(work)) == 8
    assert Path(gc.model_path(work, gc.BASE), "config.json").is_file()  # the shipped base model


def test_step1_comparison_cpu_fp32_against_cpu_fp32_gives_diff_zero(toy):
    work, _ = toy
    res = gc.hf_vs_cpu(work, models=("tiny",), device_a="cpu", dtype_a="float32")
    assert res["status"] == "ok", res
    fig = res["figures"]["models"]["tiny"]
    assert fig["scores"]["requests"] == 16  # gold and a wrong answer per item
    assert fig["scores"]["same_tokens"]
    assert fig["scores"]["abs_logp_diff"] == {"max": 0.0, "mean": 0.0}
    assert fig["scores"]["abs_p_all_diff"]["max"] == 0.0
    assert fig["generation"]["agreement"] == 1.0 and fig["generation"]["generations"] == 8
    assert fig["within_tolerance"]


def test_throughput_helpers_on_cpu(toy):
    from zcp.backends.hf import HFBackend
    from zcp.probe.prompts import ProbeConfig, answer_score_requests, zero_cot_prompt

    work, _ = toy
    pairs = gc.write_benchmark(work / "bench" / "12", 12)
    assert len({q for q, _ in pairs}) == 12
    refs = [json.loads(line) for line in (work / "bench" / "12" / "ref.jsonl").read_text().splitlines()]
    assert [r["original_id"] for r in refs] == [f"q{i:06d}" for i in range(6)]
    cfg = ProbeConfig(metrics=("p_first", "p_all"))
    reqs = answer_score_requests([zero_cot_prompt(q, cfg) for q, _ in pairs], [a for _, a in pairs], cfg)
    fig = gc.raw_hf(HFBackend.from_pretrained(gc.model_path(work, "tiny"), device="cpu"), reqs, repeats=1)
    assert fig["units"] == 12 and fig["raw_forward_units_per_s"] > 0 and fig["backend_score_units_per_s"] > 0
    ratios = gc.throughput_ratios({"run_detect_vllm": {"status": "ok", "marginal_units_per_s": 800.0},
                                   "raw_vllm": {"status": "ok", "prompt_logprobs_units_per_s": 1000.0,
                                                "prefill_units_per_s": 2000.0, "backend_score_units_per_s": 900.0},
                                   "run_detect_hf": {"status": "error"}, "raw_hf": {"status": "ok"}})
    assert ratios["run_detect_vllm / vllm_prompt_logprobs"] == 0.8
    assert ratios["run_detect_vllm / vllm_prefill"] == 0.4
    assert ratios["run_detect_hf / hf_raw_forward"] is None  # a side that did not run gives no ratio
    cmd = gc.detect_command(work / "bench" / "12", "M", work / "o", "model.backend=vllm")
    assert "probe.metrics=[p_first,p_all]" in cmd and cmd[-1] == "model.backend=vllm"


@pytest.mark.skipif(gc.cuda_available(), reason="this machine has CUDA: the GPU steps would run")
def test_gpu_steps_are_skipped_with_the_reason_without_cuda(tmp_path):
    for res in (gc.prepare(tmp_path), gc.hf_vs_cpu(tmp_path), gc.vllm_vs_hf(tmp_path), gc.throughput(tmp_path),
                gc.grpo_colocate(tmp_path), gc.demo_gpu(tmp_path)):
        assert res == {"status": "skipped", "reason": "no CUDA device (torch.cuda.is_available() is False)"}
    assert not list(tmp_path.iterdir())  # nothing was built or run


def test_step_cli_writes_its_result_and_never_raises(tmp_path):
    old = signal.getsignal(signal.SIGTERM)
    try:
        assert gc.main(["step", "environment", "--workdir", str(tmp_path), "--result", str(tmp_path / "env.json")]) == 0
        env = json.loads((tmp_path / "env.json").read_text())
        assert env["status"] == "ok" and env["figures"]["versions"]["torch"]
        assert gc.main(["step", "hf_bf16_vs_cpu_fp32", "--workdir", str(tmp_path / "none"),
                        "--result", str(tmp_path / "s1.json")]) == 0
        s1 = json.loads((tmp_path / "s1.json").read_text())
        # without CUDA: skipped; with CUDA but no prepared models: an error naming the missing prepare step
        assert s1["status"] == "skipped" or "prepare step did not finish" in s1["error"]
    finally:
        signal.signal(signal.SIGTERM, old)


def test_grpo_settings_are_gpu_7b_cut_to_a_few_steps_and_valid_trl_fields(tmp_path):
    from trl import GRPOConfig

    from zcp.simulate.sft import trainer_args

    settings, lora = gc.grpo_settings(3)
    assert settings["use_vllm"] is True and settings["vllm_mode"] == "colocate"
    assert settings["max_steps"] == 3 and settings["num_generations"] == 8 and settings["bf16"] is True
    assert lora["r"] == 64
    args = trainer_args(GRPOConfig, settings, output_dir=tmp_path, seed=0, report_to="none", cpu=True)
    assert args.use_vllm and args.vllm_mode == "colocate" and args.max_steps == 3


DEMO_OUTPUT = """\
Full-CoT greedy accuracy (%) before and after contamination.

| Split | N | Before | After SFT | After SFT+GRPO |
|---|---|---|---|---|
| C (leaked) | 50 | 94.0 | 98.0 | 98.0 |

Table 7 analogue (ZCP: one test over all reference draws per metric; ± std: stability over seeds [0, 1, 2])

| Model | Dataset | P_all S_ref | P_all C_cont | combined verdict (p) |
|---|---|---|---|---|
| FT | C | 0.081 ± 0.010 | **>0.999** | contaminated (p < 1e-10) |
| FT | U | 0.080 ± 0.012 | 0.500 ± 0.000 | no evidence (1.000) |

plot: outputs/x/c_cont_C_vs_U.png
summary: outputs/x/simulation_summary.json
"""


def test_parse_demo_output_reads_table_lines_and_verdicts():
    parsed = gc.parse_demo_output(DEMO_OUTPUT)
    assert len(parsed["table6_lines"]) == 3 and len(parsed["table7_lines"]) == 4
    assert parsed["last_column"] == {"FT / C": "contaminated (p < 1e-10)", "FT / U": "no evidence (1.000)"}
    assert parsed["summary"] == "outputs/x/simulation_summary.json"


def test_summary_verdicts_reads_the_combined_verdict_on_originals(tmp_path):
    path = tmp_path / "simulation_summary.json"
    assert gc.summary_verdicts(path) == {}
    path.write_text(json.dumps({"verdicts": {
        "FT": [{"split": "C", "variant": "original", "contaminated": True},
               {"split": "C", "variant": "paraphrase", "contaminated": False},
               {"split": "U", "variant": "original", "contaminated": False}],
        "base": [{"split": "C", "variant": "original", "contaminated": False}]}}))
    assert gc.summary_verdicts(path) == {"FT / C": True, "FT / U": False, "base / C": False}
