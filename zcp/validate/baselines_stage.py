"""The contamination simulation's `baselines` stage: the literature's detectors (evaluate/run_baselines.py
run_dir=<run>) on a simulation's C and U, after its detection stage.

The stage belongs to this layer (the detectors, the baselines job) and registers itself with the simulation when
this module is imported (`zcp.simulate.simulation_stages.register_simulation_stage`), so the simulation never
imports the validate layer: train/run_contaminate.py and train/run_demo.py import it, and `stages:
[contaminate, detect, baselines]` is valid wherever it has been imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zcp.core.rundir import BASELINES
from zcp.simulate.settings import sim_config
from zcp.simulate.simulation_stages import SimulationStage, register_simulation_stage
from zcp.validate.baselines import check_config, register_schema, run_baselines


def baselines_config(cfg: Any, run_dir: str | Path) -> Any:
    """conf/baselines.yaml composed for a contamination run: ``run_dir=<run>``, ``output_dir=<run>/baselines``,
    the run's logger, then the run's ``baselines_overrides`` (Hydra override strings, e.g.
    ``detectors=[ppl,mink20]``). Composed with Hydra itself, so the stage gets exactly the typed config and
    the compose-time errors of ``evaluate/run_baselines.py``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from zcp import REPO_ROOT

    register_schema()
    overrides = [f"run_dir={run_dir}", f"output_dir={Path(run_dir) / BASELINES}",
                 *sim_config(cfg).baselines_overrides]
    gh = GlobalHydra.instance()
    if gh.is_initialized():  # inside a Hydra app (train/run_contaminate.py): its search path is this repo's conf/
        bcfg = compose("baselines", overrides=overrides)
    else:
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
            bcfg = compose("baselines", overrides=overrides)
    OmegaConf.set_struct(bcfg, False)
    bcfg.logger = cfg.get("logger")  # the run's own logger settings (mode, project), not the file's default
    OmegaConf.set_struct(bcfg, True)
    return bcfg


def check_baselines_stage(cfg: Any) -> None:
    """The baselines' config errors now, before training (a one-line ConfigError)."""
    check_config(baselines_config(cfg, "outputs/contaminate/_check"))


def run_baselines_stage(cfg: Any, result: Any) -> dict[str, Any]:
    """The baseline detectors (evaluate/run_baselines.py run_dir=<run>) on the run's C and U: summary.json and
    baselines.md in <run>/baselines/, resumable like the other stages."""
    return run_baselines(baselines_config(cfg, result.run_dir))


register_simulation_stage(SimulationStage(
    "baselines", run=run_baselines_stage, check=check_baselines_stage,
    needs={"detect": "the zcp_* detectors read its records"}))
