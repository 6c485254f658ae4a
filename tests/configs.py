"""The one place the tests compose the real Hydra configs of this checkout (conf/<name>.yaml)."""

from __future__ import annotations

from typing import Any

from hydra import compose as _hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig, OmegaConf

# every job's schemas and stages, registered as each entry point registers its own: by importing the job's module
import zcp.config  # the ${zcp.asset:...} resolver, the model and run groups
import zcp.simulate.simulation_config  # contaminate, demo (and detect, build_data through it)
import zcp.simulate.train_config  # pretrain_base
import zcp.validate.baselines_stage  # the simulation's baselines stage, the baselines job
import zcp.validate.calibration
import zcp.validate.study_config  # noqa: F401  (ablations, report)
from zcp import REPO_ROOT


def compose(config_name: str, *overrides: str, resolve: bool = False,
            return_hydra_config: bool = False) -> DictConfig | dict[str, Any]:
    """conf/<config_name>.yaml of this checkout (`zcp.REPO_ROOT / "conf"`) composed by Hydra
    with `overrides`, as `python <job>.py <overrides>` would see it (compose-time errors raise here).

    resolve: return `OmegaConf.to_container(cfg, resolve=True)`, a plain dict with every interpolation resolved.
    return_hydra_config: keep the `hydra` node (hydra.compose's flag of the same name).
    """
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        cfg = _hydra_compose(config_name=config_name, overrides=list(overrides),
                             return_hydra_config=return_hydra_config)
        return OmegaConf.to_container(cfg, resolve=True) if resolve else cfg
