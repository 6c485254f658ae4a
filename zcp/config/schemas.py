"""Validation of a composed config against typed schemas, checked before anything loads.

Each group schema is a dataclass whose fields carry the defaults, defined beside the code that owns its choices and
registered by its module (`zcp.config.groups.register_group`; the jobs' roots by `zcp.config.jobs.register_job`).
Groups stored in Hydra's ConfigStore (`- stats: schema` in a defaults list; `STORED` for names that mean two
things, `- split: simulation`) are merged under the YAML when the config is composed, so a wrong type there
(`stats.alpha=high`) fails at compose time with the key named. Hydra's `+group.key=value` adds a key even to such a
node, and a group typed only by a job's root (conf/reference/*.yaml, `logger`, `train`, the calibration parts) is
not typed by Hydra at all, so the authority is `validate(cfg, job=...)`, which every entry point calls first: it
walks the whole config against the job's root schema (`JOBS`) and refuses an unknown key at any depth ("probe:
unknown key 'zero_cot_prefx'; did you mean 'zero_cot_prefix'?"), a value of the wrong type (`conform`:
"seed='abc': must be an integer") and, through each dataclass's `__post_init__`, a value out of range or choice —
one ConfigError line naming the key as the user wrote it (`key_alias`: `ref_model.*`, not the `model.*` of the
schema it reuses). `EXTRA_KEYS` lists keys a job reads when added but does not compose (`+split.seed`,
`+probe.api_instruction`). Without `job`, `validate` checks the groups of `SCHEMAS` by name (the library's own
calls and plain dicts in tests; a group with variants by its widest, `VALIDATE_AS`).

Where the schemas live: `stats`, `probe` (with `probe.auto`), `base_model` and the detect job in
zcp.probe.probe_config; `data`, `reference`, `reference_shift`, `split`, `paraphrase` and the build_data job in
zcp.benchmarks.data_config; `exposure` (with `exposure.suppress`), `detect`, `benchmark`, the simulation's `split`
and `paraphrase`, `cot`, `clean`, `eval` and the contaminate/demo job in zcp.simulate.simulation_config; `train`
(`train.sft` / `train.grpo` checked field by field against TRL's own dataclasses) and the pretrain_base job in
zcp.simulate.train_config; `ablation`, `report` and their jobs in zcp.validate.study_config; the baselines' and
calibration's roots in zcp.validate.baselines_config and zcp.validate.calibration. This layer's own: `model`
(zcp.config.model), `run` (zcp.config.run), `logger` (zcp.core.tracking), the arithmark and exposure_report roots.
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
from zcp.config.groups import (  # noqa: F401  (re-exported: the registry and this layer's groups)
    SCHEMAS,
    STORED,
    VALIDATE_AS,
    LoggerConfig,
    RunConfig,
    register_group,
    register_schemas,
)
from zcp.config.jobs import JOBS, ArithMarkJob, ExposureReportJob, job_schema, register_job  # noqa: F401
from zcp.config.model import ModelConfig  # noqa: F401
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
