"""A fuzz over `+group.key=value` overrides of every entry point finds no accepted unknown key.

For every entry point in train/ and evaluate/, its config is composed once with the real conf/ files; each
example applies one random `+group.key=value` override through Hydra's own override machinery (the parser and
the loader's apply step that `compose` runs, so that a run of examples does not pay a full composition each)
and runs the entry point's validation (`zcp.config.schemas.validate(cfg, job=...)`, which every entry point calls
first). An unknown key must be refused with a ConfigError naming it; a known key with a valid value (its
composed value, or a key the job reads when added) must be accepted.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from configs import compose
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf, open_dict

import zcp.config  # (registers the typed groups and the ${zcp.asset:...} resolver)
import zcp.validate.baselines
import zcp.validate.calibration  # noqa: F401  (registers the calibration job)
from zcp.config.schemas import job_schema, validate
from zcp.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
CONF = str(REPO / "conf")

# entry point -> (its primary config, the job its validation names)
ENTRY_POINTS = {
    "train/run_contaminate.py": ("contaminate", "contaminate"),
    "train/run_demo.py": ("demo", "demo"),
    "train/run_pretrain_base.py": ("pretrain_base", "pretrain_base"),
    "evaluate/run_ablations.py": ("ablations", "ablations"),
    "evaluate/run_arithmark.py": ("arithmark", "arithmark"),
    "evaluate/run_baselines.py": ("baselines", "baselines"),
    "evaluate/run_build_data.py": ("build_data", "build_data"),
    "evaluate/run_calibration.py": ("calibration", "calibration"),
    "evaluate/run_detect.py": ("detect", "detect"),
    "evaluate/run_report.py": ("report", "report"),
}
GROUP_NAMES = {p.name for p in Path(CONF).iterdir() if p.is_dir()}  # `+data=x` would select a config option
_BASE: dict[str, DictConfig] = {}


# arithmark's output_dir is ${hydra:runtime.output_dir}: applying an override outside `compose` would resolve it
# without a Hydra run (the full-composition test below keeps the interpolation)
_BASE_OVERRIDES = {"arithmark": ["output_dir=outputs/arithmark"]}


def _base(config: str) -> DictConfig:
    if config not in _BASE:
        _BASE[config] = compose(config, *_BASE_OVERRIDES.get(config, []))
    return _BASE[config]


@contextlib.contextmanager
def _with(config: str, override: str) -> Iterator[DictConfig]:
    """The composed config with one override applied as `compose` applies it. A copy of the whole config per
    example costs more than the validation, so an override inside a group changes the shared config and puts a
    copy of that group back afterwards; a top-level one works on a copy."""
    cfg = _base(config)
    parsed = OverridesParser.create().parse_overrides([override])
    top, dot, _ = parsed[0].key_or_group.partition(".")
    if not dot or top not in cfg:
        cfg = copy.deepcopy(cfg)
        ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
        yield cfg
        return
    saved = copy.deepcopy(cfg[top])
    try:
        ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
        yield cfg
    finally:
        with open_dict(cfg):
            cfg[top] = saved


def _schema_keys(job: str, group: str | None) -> set[str]:
    """Field names (and EXTRA_KEYS) of the job's root schema, or of one of its groups."""
    import dataclasses
    import typing

    cls = job_schema(job)
    if group is not None:
        f = {f.name: f for f in dataclasses.fields(cls)}[group]
        cls = f.metadata.get("schema") or typing.get_type_hints(cls)[group]
        cls = next((a for a in typing.get_args(cls) if dataclasses.is_dataclass(a)), cls)
        if not dataclasses.is_dataclass(cls):  # a free mapping (baselines params: detector names)
            return set()
    return {f.name for f in dataclasses.fields(cls)} | set(getattr(cls, "EXTRA_KEYS", {}))


def _groups(config: str) -> list[str]:
    cfg = _base(config)
    return sorted(k for k in cfg if isinstance(cfg[k], DictConfig))


_IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
_VALUE = st.one_of(st.integers(-5, 500), st.booleans(), st.sampled_from(["abc", "x_y", "null", "[1,2]", "[a]", "0.5"]))


def test_every_entry_point_is_fuzzed_and_validates_first():
    scripts = {str(p.relative_to(REPO)) for d in ("train", "evaluate") for p in (REPO / d).glob("*.py")}
    assert scripts == set(ENTRY_POINTS) | {"evaluate/run_exposure_report.py"}
    for script, (config, job) in ENTRY_POINTS.items():
        src = (REPO / script).read_text()
        assert re.search(rf'@hydra\.main\(config_path="\.\./conf", config_name="{config}"', src), script
        body = src[src.index("def main("):]
        first = next(line.strip() for line in body.splitlines()[1:] if line.strip() and not line.strip().startswith('"'))
        assert first.startswith(f'validate(cfg, job="{job}")'), (script, first)


@pytest.mark.parametrize("script", sorted(ENTRY_POINTS))
def test_an_added_unknown_key_is_refused_everywhere(script):
    config, job = ENTRY_POINTS[script]
    groups = _groups(config)
    known = {g: _schema_keys(job, g) | set(_base(config)[g]) for g in groups}
    known[""] = _schema_keys(job, None) | set(_base(config)) | GROUP_NAMES | {"hydra"}

    @settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(["", *groups]), _IDENT, _VALUE)
    def check(group: str, key: str, value: Any) -> None:
        if key in known[group]:
            return
        text = str(value).lower() if isinstance(value, bool) else str(value)
        dotted = f"{group}.{key}" if group else key
        with _with(config, f"+{dotted}={text}") as cfg, pytest.raises(ConfigError) as e:
            validate(cfg, job=job)
        assert key in str(e.value) and (not group or group in str(e.value)), str(e.value)

    check()


def _leaves(cfg: DictConfig, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of the composed config's simple leaves: ints, bools, plain words, null."""
    out = []
    for k in cfg:
        if OmegaConf.is_interpolation(cfg, k) or OmegaConf.is_missing(cfg, k):
            continue
        v = cfg[k]
        if isinstance(v, DictConfig):
            out += _leaves(v, f"{prefix}{k}.")
        elif v is None or isinstance(v, (bool, int)) or (isinstance(v, str) and re.fullmatch(r"[A-Za-z_][\w.-]*", v)):
            out.append((f"{prefix}{k}", v))
    return out


@pytest.mark.parametrize("script", sorted(ENTRY_POINTS))
def test_a_known_key_with_a_valid_value_is_accepted(script):
    """The negative control: the composed value of any key, set again by an override, is accepted."""
    config, job = ENTRY_POINTS[script]
    validate(_base(config), job=job)
    leaves = _leaves(_base(config))
    assert leaves

    @settings(max_examples=20, deadline=None)
    @given(st.sampled_from(leaves))
    def check(leaf: tuple[str, Any]) -> None:
        key, value = leaf
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        with _with(config, f"{key}={text}") as cfg:
            validate(cfg, job=job)

    check()


@pytest.mark.parametrize(("script", "override", "key"), [
    ("train/run_contaminate.py", "+probe.zero_cot_prefx=x", "zero_cot_prefx"), ("train/run_demo.py", "+seeed=3", "seeed"),
    ("evaluate/run_ablations.py", "+ablation.ratio=[0.5]", "ratio"),
    ("evaluate/run_baselines.py", "+params.ppll.text=x", "ppll"), ("evaluate/run_build_data.py", "+reference.mm=2", "mm"),
    ("evaluate/run_calibration.py", "+joint.replicate=3", "replicate"), ("evaluate/run_report.py", "+report.titel=x", "titel"),
    ("evaluate/run_arithmark.py", "+model.batchsize=3", "batchsize"),
    ("train/run_pretrain_base.py", "+limits.max_operands=9", "max_operands"),
    ("evaluate/run_detect.py", "+stats.alfa=0.1", "alfa"),
])
def test_the_same_through_a_full_composition(script, override, key):
    """One case per entry point through `compose` itself (what the fuzz's one-step application stands for)."""
    config, job = ENTRY_POINTS[script]
    cfg = compose(config, override)
    with pytest.raises(ConfigError, match=re.escape(repr(key))):
        validate(cfg, job=job)


def _exposure_report_main() -> Any:
    spec = importlib.util.spec_from_file_location("zcp_entry_run_exposure_report", REPO / "evaluate/run_exposure_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@settings(max_examples=30, deadline=None)
@given(_IDENT, _VALUE)
def test_run_exposure_report_refuses_an_unknown_argument(key, value):
    """The one entry point without Hydra: its `key=value` arguments are checked against ExposureReportJob."""
    if key in ("root", "name", "out"):
        return
    mod = _exposure_report_main()
    called = []
    mod.write_report = lambda *a, **k: called.append(a)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        mod.main([f"{key}={value}"])
    assert e.value.code == 2 and not called
    assert err.getvalue().startswith("error: ") and repr(key) in err.getvalue()


def test_run_exposure_report_accepts_its_arguments(tmp_path):
    mod = _exposure_report_main()
    called = []
    mod.write_report = lambda *a: called.append(a)
    mod.main([f"root={tmp_path}", "name=exp", "out=x"])
    assert called == [(str(tmp_path), "exp", "x")]
