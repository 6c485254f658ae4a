"""The config groups' registry: where each group's schema registers itself, and Hydra's ConfigStore holds it.

A schema lives beside the code that owns its choices (the probe's `stats` and `probe` in zcp.probe.probe_config,
`data` and the build job's groups in zcp.benchmarks.data_config, the simulation's in zcp.simulate.simulation_config
and zcp.simulate.train_config, the studies' in zcp.validate.study_config) and calls `register_group` when its module
is imported; the config layer keeps the mechanics (composition, checks, one-line errors) and imports none of them.
This layer's own groups are registered here: `model` (zcp.config.model) and `run` (zcp.config.run; the simulation's
`run: simulation` is zcp.simulate.train_config's); `logger` is zcp.core.tracking's.

`SCHEMAS` maps a group name to the schema `zcp.config.schemas.validate` checks it by without a job; `STORED` holds
the groups whose name means two things (run_build_data's `split` and `paraphrase` vs the simulation's), stored under
their option names and checked by each job's root schema only; `VALIDATE_AS` names the schema `validate` without a
job checks a group of variants by (the widest).
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from zcp.config.conform import MESSAGE_PREFIX
from zcp.config.model import APISettings, ModelConfig, ModelProbeSettings, VLLMSettings
from zcp.config.run import RunConfig  # the `run` group's schema (re-exported)
from zcp.core.tracking import LoggerConfig  # the `logger` group, defined beside the tracker that reads it

SCHEMAS: dict[str, type] = {}
STORED: dict[tuple[str, str], type] = {}
VALIDATE_AS: dict[str, type] = {}


def register_group(group: str, node: type, *, name: str = "schema", by_name: bool = True,
                   prefix: str | None = None, validate_as: bool = False) -> None:
    """Store the schema `node` in Hydra's ConfigStore as option `name` of `group` (a YAML's defaults list names
    `- <group>: <name>`, merged under the file when composed) and name the key its messages use (`prefix`, default
    the group).

    With `name="schema"` and `by_name` (the default) `validate` without a job also checks the group by `node`;
    otherwise (another option name, or `by_name=False`: a group whose name means two things) only the jobs' roots
    type it. `validate_as`: `validate` without a job checks the group by `node`, a wider variant of its schema
    (the simulation's `run` validates as a detect run's does). Called by the module that defines the schema, when
    it is imported."""
    if validate_as:
        VALIDATE_AS[group] = node
    if name == "schema" and by_name:
        SCHEMAS[group] = node
    else:
        STORED[(group, name)] = node
    MESSAGE_PREFIX[node] = prefix or group
    ConfigStore.instance().store(group=group, name=name, node=node)


def register_schemas() -> None:
    """Store every registered schema again (Hydra's ConfigStore is process-wide: a store emptied by a test gets the
    groups of every schema module imported so far back)."""
    cs = ConfigStore.instance()
    for group, node in SCHEMAS.items():
        cs.store(group=group, name="schema", node=node)
    for (group, name), node in STORED.items():
        cs.store(group=group, name=name, node=node)


register_group("run", RunConfig)
register_group("model", ModelConfig)

# the prefix each schema's messages use (its usual place), so a schema checked elsewhere names the real key
MESSAGE_PREFIX.update({
    ModelConfig: "model", VLLMSettings: "model.vllm", APISettings: "model.api", ModelProbeSettings: "model.probe",
    LoggerConfig: "logger", RunConfig: "run",
})
