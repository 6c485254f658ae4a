"""zcp: simulate evasive benchmark contamination and detect it with the Zero-CoT Probe."""

__version__ = "0.1.0"

from pathlib import Path as _Path

PACKAGE_ROOT = _Path(__file__).resolve().parent  # zcp/
ASSETS = PACKAGE_ROOT / "assets"  # the shipped base models
REPO_ROOT = PACKAGE_ROOT.parent  # conf/, the checkout (editable installs)
