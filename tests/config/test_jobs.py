"""Every config group a job reads is typed and checked before anything loads (zcp.config.schemas.validate).

Each case is the issue's command: its overrides composed with the real conf/ files through Hydra's compose API,
then the entry point itself (train/*.py, evaluate/*.py, called with the composed config as Hydra calls it). It must
end as ONE line "error: ..." naming the key the user set, exit status 2, with no model loaded (the loaders are
patched to fail the test if called) and nothing written (the output dir and the working directory stay empty).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from configs import compose

import zcp.config  # (registers the typed groups and the ${zcp.asset:...} resolver)
import zcp.validate.baselines
import zcp.validate.calibration  # noqa: F401  (registers the calibration job)
from zcp.config.schemas import validate
from zcp.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _entry(script: str) -> Any:
    """The entry point's `main` (its Hydra-decorated function; `main(cfg)` runs it on a composed config)."""
    name = "zcp_entry_" + script.replace("/", "_").removesuffix(".py")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / script)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name].main


@pytest.fixture
def no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any model loads."""
    import transformers

    import zcp.backends.registry
    import zcp.config

    def boom(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a model was loaded before the config was checked")

    monkeypatch.setattr(zcp.backends.registry, "build_backend", boom)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", boom)


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    """A tiny benchmark file and its reference set (valid: only the override under test is wrong)."""
    d = tmp_path / "in"
    d.mkdir()
    items = [{"id": f"q{i}", "question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(6)]
    refs = [{"id": f"q{i}::ref0", "original_id": f"q{i}", "question": f"What is {i + 2} + {i + 1}?",
             "answer": str(2 * i + 3)} for i in range(6)]
    for name, rows in (("items.jsonl", items), ("ref.jsonl", refs)):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"data": str(d / "items.jsonl"), "ref": str(d / "ref.jsonl")}


def _refused(script: str, config: str, overrides: list[str], key: str, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], absent: str | None = None) -> str:
    """Run the entry point on the composed config; assert one line naming `key`, exit 2, nothing written."""
    out = tmp_path / "out"
    cfg = compose(config, *overrides, f"output_dir={out}", "logger=none")
    main = _entry(script)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as exc:
        main(cfg)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert key in err, err
    if absent is not None:
        assert absent not in err, err
    assert not out.exists() and not any(work.iterdir()), "files were written before the config was checked"
    return err


def _detect(inputs: dict[str, str], *extra: str) -> list[str]:
    return [f"data.path={inputs['data']}", f"data.reference_path={inputs['ref']}", *extra]


# ------------------------------------------------------------------- "+group.typo" is accepted and ignored
@pytest.mark.parametrize(("override", "key"), [
    ('+probe.zero_cot_prefx="#### "', "zero_cot_prefx"),
    ("+probe.metrcs=[acc]", "metrcs"),
    ("+seeed=3", "seeed"),
])
def test_run_detect_refuses_an_added_unknown_key(override, key, inputs, no_models, tmp_path, monkeypatch, capsys):
    err = _refused("evaluate/run_detect.py", "detect", _detect(inputs, override), key, tmp_path, monkeypatch, capsys)
    if "probe" in override:
        assert "probe" in err and "did you mean" in err  # "probe: unknown key 'metrcs'; did you mean 'metrics'?"


def test_run_calibration_refuses_a_stats_group_it_does_not_have(no_models, tmp_path, monkeypatch, capsys):
    # parts=[]: the study itself is not what is tested (and would take minutes on the old code)
    _refused("evaluate/run_calibration.py", "calibration", ["parts=[]", "+stats.alpha=0"], "'stats'",
             tmp_path, monkeypatch, capsys)


# ------------------------------------------------------------------- run_build_data: counts out of range
@pytest.mark.parametrize(("override", "key"), [("reference.m=0", "reference.m"), ("reference.m=-1", "reference.m"),
                                               ("paraphrase.k=-2", "paraphrase.k"),
                                               ("split.c_fraction=1.5", "split.c_fraction"),
                                               ("split.c_fraction=0", "split.c_fraction")])
def test_run_build_data_refuses_counts_out_of_range(override, key, no_models, tmp_path, monkeypatch, capsys):
    _refused("evaluate/run_build_data.py", "build_data", ["data=wordproblems", "data.n=12", override], key,
             tmp_path, monkeypatch, capsys)


# ------------------------------------------------------------------- tracebacks that must be one line
@pytest.mark.parametrize(("override", "key"), [
    ("probe.metrics=[acc,foo]", "probe.metrics"),
    ("probe.mode=chat", "probe.mode"),
    ("seeds=0", "seeds"),
    ("seed=abc", "seed"),
    ("probe.zero_cot_prefix=null", "probe.zero_cot_prefix"),
    ("probe.zero_cot_max_tokens=0", "probe.zero_cot_max_tokens"),  # with acc (a default metric)
])
def test_run_detect_mistakes_are_one_line(override, key, inputs, no_models, tmp_path, monkeypatch, capsys):
    _refused("evaluate/run_detect.py", "detect", _detect(inputs, override), key, tmp_path, monkeypatch, capsys)


def test_zero_cot_budget_zero_is_fine_without_generation():
    """Only acc/con generate after the prefix: with p_first/p_all alone a zero budget is a valid choice."""
    cfg = compose("detect", "probe.zero_cot_max_tokens=0", "probe.metrics=[p_first,p_all]")
    assert validate(cfg, job="detect")["probe"].zero_cot_max_tokens == 0


@pytest.mark.parametrize(("override", "key"), [
    ("split.c_fraction=1.5", "split.c_fraction"), ("split.c_fraction=0", "split.c_fraction"),
    ("benchmark.source=wordproblem", "benchmark.source"), ("benchmark.n=-10", "benchmark.n"),
    ("train.sft.per_device_train_batch_size=-1", "train.sft.per_device_train_batch_size"),
])
def test_run_contaminate_mistakes_are_one_line(override, key, no_models, tmp_path, monkeypatch, capsys):
    _refused("train/run_contaminate.py", "contaminate", [override], key, tmp_path, monkeypatch, capsys)


def test_a_bad_learning_rate_is_named_as_the_user_set_it(no_models, tmp_path, monkeypatch, capsys):
    """exposure.lr follows train.sft.learning_rate: the message names the key set, not exposure.lr."""
    _refused("train/run_contaminate.py", "contaminate", ["train.sft.learning_rate=abc"],
             "train.sft.learning_rate", tmp_path, monkeypatch, capsys, absent="exposure.lr")


@pytest.mark.parametrize("value", ["nonexist", "llm"])
def test_run_baselines_refuses_a_paraphraser_dpcc_cannot_run(value, inputs, no_models, tmp_path, monkeypatch, capsys):
    _refused("evaluate/run_baselines.py", "baselines",
             [f"data.path={inputs['data']}", "detectors=[ppl,dpcc]", f"params.dpcc.paraphraser={value}"],
             "params.dpcc", tmp_path, monkeypatch, capsys)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda(), reason="the check is for a machine without CUDA")
@pytest.mark.parametrize(("script", "config", "override", "key"), [
    ("evaluate/run_detect.py", "detect", "model.device=cuda", "model.device"),
    ("evaluate/run_baselines.py", "baselines", "ref_model.device=cuda", "ref_model.device"),
])
def test_a_cuda_device_without_cuda_is_one_line(script, config, override, key, inputs, no_models, tmp_path,
                                                monkeypatch, capsys):
    extra = _detect(inputs) if config == "detect" else [f"data.path={inputs['data']}", "detectors=[ppl]"]
    _refused(script, config, [*extra, override], key, tmp_path, monkeypatch, capsys)


# ------------------------------------------------------------------- the mechanism
def test_unknown_keys_are_refused_at_any_depth_with_a_suggestion():
    cfg = compose("detect", "+model.vllm.tensor_paralel_size=2")
    with pytest.raises(ConfigError, match=r"model\.vllm: unknown key 'tensor_paralel_size'; did you mean "
                                          r"'tensor_parallel_size'\?"):
        validate(cfg, job="detect")
    with pytest.raises(ConfigError, match=r"paraphrase\.options: unknown key 'tempreature'"):
        validate(compose("contaminate", "+paraphrase.options.tempreature=0.5"), job="contaminate")
    with pytest.raises(ConfigError, match=r"real_originals\.pools\.gsm8k: unknown key 'sise'"):
        validate(compose("calibration", "+real_originals.pools.gsm8k.sise=3"), job="calibration")


def test_keys_a_job_reads_when_added_are_known():
    """`+split.seed` (the simulation's split seed) and `+probe.api_instruction` are read by the jobs: accepted."""
    assert validate(compose("demo", "+split.seed=3"), job="demo")["split"].c_fraction == 0.5
    validate(compose("detect", "+probe.api_instruction=Answer now."), job="detect")
    with pytest.raises(ConfigError, match=r"split\.seed='x'"):
        validate(compose("demo", "+split.seed=x"), job="demo")


def test_plain_dicts_still_validate_by_group():
    """The library's own calls (and tests) pass plain dicts of a few groups: those are checked by name."""
    assert validate({"stats": {"alpha": 0.01}})["stats"].alpha == 0.01
    with pytest.raises(ConfigError, match=r"probe\.mode"):
        validate({"probe": {"mode": "chat"}})
    with pytest.raises(ConfigError, match=r"probe: unknown key 'metrcs'"):
        validate({"probe": {"metrcs": ["acc"]}})


def test_messages_name_the_key_where_a_schema_is_reused():
    """ref_model is a model config: its mistakes say ref_model.*, not model.*."""
    cfg = compose("baselines", "ref_model.batch_size=0")
    with pytest.raises(ConfigError, match=r"^ref_model\.batch_size=0"):
        validate(cfg, job="baselines")
