"""Typed schemas of the config groups and of each job's top level, checked before anything loads.

Each group schema is a dataclass whose fields carry the defaults. Groups stored in Hydra's ConfigStore
(`- stats: schema` in a defaults list; `STORED` for names that mean two things, `- split: simulation`) are
merged under the YAML when the config is composed, so a wrong type there (`stats.alpha=high`) fails at compose
time with the key named. Hydra's `+group.key=value` adds a key even to such a node, and a group typed only here
(conf/reference/*.yaml, `logger`, `train`, the calibration parts) is not typed by Hydra at all, so the
authority is `validate(cfg, job=...)`, which every entry point calls first: it walks the whole config against
the job's root schema (`JOBS`: DetectJob, SimulationJob, BuildDataJob, ...) and refuses an unknown key at any
depth ("probe: unknown key 'zero_cot_prefx'; did you mean 'zero_cot_prefix'?"), a value of the wrong type
(`conform`: "seed='abc': must be an integer") and, through each dataclass's `__post_init__`, a value out of
range or choice — one ConfigError line naming the key as the user wrote it (`key_alias`: `ref_model.*`, not
the `model.*` of the schema it reuses). `EXTRA_KEYS` lists keys a job reads when added but does not compose
(`+split.seed`, `+probe.api_instruction`). Without `job`, `validate` checks the groups of `SCHEMAS` by name
(the library's own calls and plain dicts in tests; a group with variants by its widest, `VALIDATE_AS`).

Groups: `stats` (the test), `run` (probing in chunks), `detect` (the simulation's detection stage), `exposure`
(the contamination knobs), `model` (zcp.config.model.ModelConfig), `data` (a benchmark file, its reference
set and variants; every conf/data/*.yaml extends conf/data/jsonl.yaml, which extends this schema), `probe`,
`benchmark`, `split`, `paraphrase`, `cot`, `clean`, `eval`, `reference`, `reference_shift`, `logger`, `train`
(`train.sft` / `train.grpo` checked field by field against TRL's own dataclasses), `ablation`
(evaluate/run_ablations.py) and `report` (evaluate/run_report.py); the calibration parts are
the settings dataclasses of zcp.validate.calibration's modules; baselines' root is
zcp.validate.baselines.BaselinesConfig.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from zcp.config.checks import (  # noqa: F401  (re-exported: the schemas' checks)
    check_device,
    check_seeds,
    check_value,
    key_alias,
    unknown_key_message,
    user_key,
)
from zcp.config.conform import _describe, build, conform, plain  # noqa: F401
from zcp.config.groups import (  # noqa: F401  (re-exported: every group schema)
    ABLATIONS,
    BENCHMARK_SOURCES,
    FORMATS,
    OVERFLOW_POLICIES,
    PAIR_BY,
    PROBE_METRICS,
    PROBE_MODES,
    SCHEMAS,
    STORED,
    TRUNCATION_METRICS,
    VALIDATE_AS,
    AblationConfig,
    BaseModelConfig,
    BenchmarkConfig,
    CleanConfig,
    CotConfig,
    DataConfig,
    EvalConfig,
    ExposureConfig,
    ExposureRunsConfig,
    FieldsConfig,
    LoggerConfig,
    LoraSettings,
    ParaphraseConfig,
    ProbeGroupConfig,
    ReferenceBuildConfig,
    ReferenceChoice,
    ReferenceShiftConfig,
    ReportConfig,
    RunConfig,
    SimDetectConfig,
    SimParaphraseConfig,
    SimRunConfig,
    SimSplitConfig,
    SplitConfig,
    StatsConfig,
    StudyRunConfig,
    TrainConfig,
    check_paraphraser_options,
    register_schemas,
)
from zcp.config.jobs import (  # noqa: F401  (re-exported: every job root)
    JOBS,
    SIM_STAGES,
    AblationsJob,
    ArithMarkJob,
    BuildDataJob,
    DetectJob,
    ExposureReportJob,
    NumberLimits,
    PretrainBaseJob,
    ReportJob,
    SimulationJob,
    job_schema,
)
from zcp.errors import ConfigError

T = TypeVar("T")


def validate(cfg: Any, job: str | None = None) -> dict[str, Any]:
    """Check a composed config before anything is read or loaded; ConfigError (one line) names the key.

    With `job` (an entry point: detect, contaminate, demo, build_data, baselines, ablations, calibration,
    report, arithmark, pretrain_base, exposure_report), the whole config against the job's root schema
    (`JOBS`): an unknown key at any depth (`+probe.zero_cot_prefx=...`, `+seeed=3`), a value of the wrong type
    (`seed=abc`) or out of range is refused. Without `job` (the library's own calls, plain dicts in tests),
    each group of `SCHEMAS` present in `cfg` is checked the same way.

    Returns the checked dataclass instances by group (with `job`, also "__job__": the root instance).
    """
    values = plain(cfg) if cfg is not None else {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"a config must be a mapping, not {values!r}")
    if job is not None:
        root = build(job_schema(job), values, "")
        out = {f.name: getattr(root, f.name) for f in dataclasses.fields(root)
               if f.name in values and dataclasses.is_dataclass(getattr(root, f.name))}
        out["__job__"] = root
        return out
    out = {}
    for group, node in SCHEMAS.items():
        node = VALIDATE_AS.get(group, node)
        sub = values.get(group)
        if sub is None:
            continue
        check_value(isinstance(sub, Mapping), group, sub, _describe(node))
        out[group] = build(node, sub, group)
    return out


def group_config(cls: type[T], cfg: Any, where: str) -> T:
    """One group's checked instance, for a library function that takes a group (`load_datasets(data)`).

    `cfg` itself when it is already one (the group of a job's validated root: `validate(cfg, job=...)["__job__"]`),
    else built from a mapping or DictConfig as `validate` builds it (resolved in its own tree; None: every
    default). The defaults are the dataclass's: a default that is an interpolation (`DataConfig.sample_seed`,
    `${oc.select:seed,0}`) and is not given resolves here, outside any run config, to its own fallback.
    """
    if isinstance(cfg, cls):
        return cfg
    values = plain(cfg) if cfg is not None else {}
    check_value(isinstance(values, Mapping), where, values, _describe(cls))
    obj = build(cls, values, where)
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if f.name not in values and isinstance(value, str) and "${" in value:
            from omegaconf import OmegaConf

            setattr(obj, f.name, OmegaConf.create({"value": value}).value)
    return obj
