"""Baseline contamination detectors behind one registry (see `zcp.validate.detectors.base`).

Importing the package registers the built-in detectors: ppl, zlib, mink/minkK, minkpp/minkppK
(zcp.validate.detectors.likelihood), ref (reference_model), dpcc, recon and guided (reconstruction), trap (trap
controls, MathTrap) and one zcp_<metric> per probe metric of zcp.probe.metrics (zcp_gap: ZCP's item-level
score from detection records; zcp_acc/zcp_con/zcp_p_first/zcp_p_all for the built-in metrics).
"""

from zcp.validate.detectors import dpcc, likelihood, reconstruction, reference_model, trap, zcp_gap  # noqa: F401 - registration
from zcp.validate.detectors.base import (
    Detector,
    DetectorContext,
    DetectorSpec,
    auroc,
    available_detectors,
    get_detector,
    register_detector,
    spec_of,
    tpr_at_fpr,
)
from zcp.validate.detectors.zcp_gap import zcp_item_scores

__all__ = ["Detector", "DetectorContext", "DetectorSpec", "auroc", "available_detectors", "get_detector",
           "register_detector", "spec_of", "tpr_at_fpr", "zcp_item_scores"]
