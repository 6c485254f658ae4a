"""The contamination simulation: C/U split → paraphrase C → LoRA SFT → GRPO → merged model + exposure record.

`contaminate(cfg)` runs the whole pipeline into one run directory and is resumable: every stage writes
its final output atomically and is skipped when that output exists; a trainer killed mid-stage resumes
from its newest checkpoint. The run directory holds

* ``manifest.json`` (C/U ids), ``benchmark_items.jsonl``, ``variants.jsonl`` (the paraphrases trained on),
  ``sft_data.jsonl`` / ``grpo_data.jsonl`` (the exact training examples, with format and source);
* ``sft_adapter/`` (LoRA on the base), ``grpo_adapter/`` (LoRA on base+SFT merged), ``model/`` (the final
  merged model, safetensors + tokenizer);
* ``exposure.json``: every knob, the seeds, the leaked C ids and the paths detection needs;
* ``table6.md`` / ``table6.json``: full-CoT greedy accuracy before/after on C (leaked, not leaked) and U,
  with per-item records under ``eval/``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zcp.data.schema import DataError, Item
from zcp.io import (
    RunLock,
    model_fingerprint,
    read_json,
    read_jsonl,
    seed_everything,
    sha256_file,
    stable_hash,
    write_json,
    write_jsonl,
)
from zcp.training import data as tdata
from zcp.training.rewards import score_completion
from zcp.training.sft import adapter_done, load_model, load_tokenizer

log = logging.getLogger(__name__)

EXPOSURE_SCHEMA = 1
# Config sections that do not change what is trained or measured here (detection settings included):
# free to differ on resume, and left out of the default run-dir hash.
_NOT_FINGERPRINTED = ("logger", "output_dir", "hydra", "stages", "detect", "probe", "stats", "run")


@dataclass
class ContaminationResult:
    """Where a contamination run put its outputs, and what it measured."""

    run_dir: Path
    model_dir: Path
    sft_adapter_dir: Path
    grpo_adapter_dir: Path | None
    manifest_path: Path
    exposure_path: Path
    table6: dict[str, Any]
    leaked_ids: list[str]
    stages_run: list[str] = field(default_factory=list)
    stages_skipped: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- config
def _to_dict(cfg: Any) -> dict[str, Any]:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    return json.loads(json.dumps(dict(cfg)))


def _config_fingerprint(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config sections that decide a run's outputs, plus the base model's content fingerprint."""
    fp = {k: v for k, v in cfg.items() if k not in _NOT_FINGERPRINTED}
    fp["base_model_fingerprint"] = model_fingerprint(resolve_model_path((cfg.get("model") or {}).get("path")))
    return fp


def _run_dir(cfg: Mapping[str, Any], fp: dict[str, Any] | None = None) -> Path:
    """`output_dir` if set, else outputs/contaminate/<name>__<hash of the config>: rerunning resumes."""
    if cfg.get("output_dir"):
        return Path(str(cfg["output_dir"]))
    fp = fp or _config_fingerprint(cfg)
    h = stable_hash(json.dumps(fp, sort_keys=True, default=str), 8)
    return Path("outputs") / "contaminate" / f"{str(cfg.get('name') or 'contaminate').replace('/', '_')}__{h}"


def _or(value: Any, default: int) -> int:
    return default if value is None else int(value)


def shipped_base_model() -> Path:
    """The project's embedded tiny base model folder (`zcp/assets/base_model/`)."""
    import zcp

    return Path(zcp.__file__).resolve().parent / "assets" / "base_model"


def resolve_model_path(path: str | None) -> str:
    """A model path: None / "" / "tiny" → the shipped base model; a relative local path → absolute; else a hub id."""
    if path in (None, "", "tiny", "base_model"):
        return str(shipped_base_model())
    p = Path(str(path)).expanduser()
    if p.exists():
        return str(p.resolve())
    try:  # relative to where the user launched Hydra
        from hydra.utils import to_absolute_path

        q = Path(to_absolute_path(str(path)))
        if q.exists():
            return str(q)
    except (ImportError, ValueError):
        pass
    return str(path)


def _fingerprint_check(run_dir: Path, cfg: dict[str, Any], fp: dict[str, Any] | None = None) -> None:
    """Refuse to resume a run directory whose stage outputs were made by a different config or base model."""
    fp = fp or _config_fingerprint(cfg)
    path = run_dir / "run_config.json"
    if path.exists():
        old = read_json(path)
        if old.get("fingerprint") != fp:
            diff = sorted(k for k in set(old.get("fingerprint", {})) | set(fp)
                          if old.get("fingerprint", {}).get(k) != fp.get(k))
            raise ValueError(f"{run_dir} holds a run with a different config (sections {diff} differ); "
                             "use a fresh output_dir")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(path, {"fingerprint": fp, "config": cfg})


# ---------------------------------------------------------------------------------------------- data
def load_benchmark(cfg: Mapping[str, Any]) -> list[Item]:
    """The benchmark items: generated word problems, an Item/GSM8K-style file, or the `data` config group."""
    b = dict(cfg.get("benchmark") or {})
    source = b.get("source", "wordproblems")
    if source == "wordproblems":
        from zcp.data.wordproblems import generate_word_problems

        return generate_word_problems(int(b.get("n", 200)), seed=int(b.get("seed", 0)),
                                      families=b.get("families"), id_prefix=b.get("id_prefix", "wp"))
    from zcp.data.loaders import load_items

    if source == "file":
        return load_items(resolve_model_path(b["path"]), format=b.get("format", "items"), limit=b.get("limit"))
    if source == "data":  # the lead's `data` group: {path, format, ...}
        d = dict(cfg.get("data") or {})
        return load_items(resolve_model_path(d["path"]), format=d.get("format", "items"), limit=b.get("limit"))
    raise ValueError(f"unknown benchmark.source {source!r} (wordproblems | file | data)")


def _manifest(cfg: Mapping[str, Any], items: list[Item], run_dir: Path, seed: int) -> Any:
    from zcp.data.split import Manifest, split_items

    dest = run_dir / "manifest.json"
    if cfg.get("manifest_path"):
        src = Path(resolve_model_path(cfg["manifest_path"]))
        manifest = Manifest.load(src)
        if src.resolve() != dest.resolve():
            shutil.copyfile(src, dest)
        return manifest
    if dest.exists():
        return Manifest.load(dest)
    split = dict(cfg.get("split") or {})
    manifest = split_items(items, seed=_or(split.get("seed"), seed), c_fraction=float(split.get("c_fraction", 0.5)),
                           stratify_by=split.get("stratify_by"))
    manifest.save(dest)
    return manifest


def choose_leaked(c_items: Sequence[Item], fraction: float, seed: int) -> list[Item]:
    """The seeded subset of C that is leaked: round(fraction·|C|) items (all of C at 1.0)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"exposure.leak_fraction must be in [0, 1], got {fraction}")
    ordered = sorted(c_items, key=lambda it: it.id)
    n = math.floor(fraction * len(ordered) + 0.5)
    chosen = set(random.Random(f"leak|{seed}").sample(range(len(ordered)), n))
    return [it for i, it in enumerate(ordered) if i in chosen]


def n_clean_examples(n_bench: int, clean_fraction: float) -> int:
    """How many clean examples make them `clean_fraction` of the SFT set: round(n·p / (1 − p))."""
    if not 0.0 <= clean_fraction < 1.0:
        raise ValueError(f"exposure.clean_fraction must be in [0, 1), got {clean_fraction}")
    return math.floor(n_bench * clean_fraction / (1.0 - clean_fraction) + 0.5)


def build_training_data(cfg: Mapping[str, Any], items: list[Item], manifest: Any, run_dir: Path, seed: int,
                        teacher: Any | None = None) -> dict[str, Any]:
    """Leak selection, paraphrases, CoTs, format mix, clean mix; writes the JSONL files and returns counts."""
    ex = dict(cfg["exposure"])
    c_items, u_items = manifest.subset(items, "C"), manifest.subset(items, "U")
    leaked = choose_leaked(c_items, float(ex.get("leak_fraction", 1.0)), seed)
    variants, short = tdata.make_variants(leaked, int(ex["k"]), seed, ex.get("paraphraser", "auto"),
                                          bool(ex.get("include_original", False)))
    cot_cfg = dict(cfg.get("cot") or {})
    cots, missing = tdata.synthesize_cots(leaked, teacher, attempts=int(cot_cfg.get("attempts", 4)),
                                          max_new_tokens=int(cot_cfg.get("max_new_tokens", 512)),
                                          temperature=float(cot_cfg.get("temperature", 0.7)), seed=seed)
    f = float(ex.get("answer_only_fraction", 0.0))
    records = tdata.build_sft_records(variants, cots, f, seed, on_missing_cot=cot_cfg.get("on_missing", "answer"))
    n_clean = n_clean_examples(len(records), float(ex.get("clean_fraction", 0.0)))
    clean_cfg = dict(cfg.get("clean") or {})
    clean = tdata.clean_items(n_clean, seed=_or(clean_cfg.get("seed"), seed + 1), exclude_items=items,
                              source=clean_cfg.get("source", "wordproblems"), path=clean_cfg.get("path"),
                              fmt=clean_cfg.get("format", "items"))
    clean_cots, _ = tdata.synthesize_cots(clean, None)
    clean_f = clean_cfg.get("answer_only_fraction")
    records += tdata.build_sft_records(clean, clean_cots, f if clean_f is None else float(clean_f), seed + 1,
                                       source="clean", on_missing_cot="drop")
    grpo_src = variants if ex.get("grpo_prompts", "variants") == "variants" else leaked
    write_jsonl(run_dir / "benchmark_items.jsonl", [it.to_dict() for it in items])
    write_jsonl(run_dir / "variants.jsonl", [v.to_dict() for v in variants])
    write_jsonl(run_dir / "grpo_data.jsonl", tdata.grpo_records(grpo_src))
    write_jsonl(run_dir / "sft_data.jsonl", records)  # written last: its presence marks the stage done
    counts = {
        "n_items": len(items), "n_c": len(c_items), "n_u": len(u_items), "n_leaked": len(leaked),
        "n_variants": len(variants), "n_sft_examples": len(records),
        "n_answer_only": sum(r["format"] == "answer" for r in records if r["source"] == "benchmark"),
        "n_cot": sum(r["format"] == "cot" for r in records if r["source"] == "benchmark"),
        "n_clean": sum(r["source"] == "clean" for r in records), "n_grpo_prompts": len(grpo_src),
        "paraphrase_shortfall": short, "cot_missing": missing,
    }
    write_json(run_dir / "data_counts.json", counts)
    return counts


# ---------------------------------------------------------------------------------------------- eval
def full_cot_eval(model: Any, tokenizer: Any, items: Sequence[Item], *, max_new_tokens: int = 256,
                  batch_size: int = 64, chat: bool = True) -> list[dict[str, Any]]:
    """Greedy full-CoT generation on each item's question; per-item pred / correct / malformed records."""
    from zcp.backends.base import GenerationRequest, Prompt
    from zcp.backends.hf import HFBackend

    backend = HFBackend(model, tokenizer, gen_batch_size=batch_size)
    outs = backend.generate([GenerationRequest(Prompt(user=it.question, chat=chat), max_new_tokens=max_new_tokens)
                             for it in items])
    rows = []
    for it, text in zip(items, outs, strict=True):
        s = score_completion(text, it.answer)
        rows.append({"id": it.id, "gold": it.answer, "pred": s["pred"], "correct": bool(s["correct"]),
                     "malformed": bool(s["malformed"]), "formatted": bool(s["formatted"]), "output": text})
    return rows


def _eval_subset(items: Sequence[Item], max_items: int | None) -> list[Item]:
    ordered = sorted(items, key=lambda it: it.id)
    return ordered if not max_items else ordered[: int(max_items)]


def _evaluate_stage(stage: str, model_fn: Any, tokenizer: Any, splits: dict[str, list[Item]], run_dir: Path,
                    ecfg: Mapping[str, Any], chat: bool) -> tuple[dict[str, Any], bool]:
    """Accuracy per split for one model (cached in eval/<stage>.json); returns (summary, was_run)."""
    out = run_dir / "eval" / f"{stage}.json"
    if out.exists():
        return read_json(out), False
    model = model_fn()
    dev = ecfg.get("device") or ("cuda" if _cuda() else "cpu")  # under accelerate, rank 0 evaluates on its GPU
    model.to(dev)
    summary: dict[str, Any] = {}
    records = []
    for split, its in splits.items():
        if not its:
            continue
        rows = full_cot_eval(model, tokenizer, its, max_new_tokens=int(ecfg.get("max_new_tokens", 256)),
                             batch_size=int(ecfg.get("batch_size", 64)), chat=chat)
        for r in rows:
            r["split"] = split
        records += rows
        summary[split] = {"n": len(rows), "acc": sum(r["correct"] for r in rows) / len(rows),
                          "malformed": sum(r["malformed"] for r in rows) / len(rows)}
    write_jsonl(run_dir / "eval" / f"{stage}.jsonl", records)
    write_json(out, summary)
    return summary, True


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def table6(evals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Table 6 analogue: rows = splits, columns = model stages (base, after SFT, final), accuracy and Δ."""
    stages = list(evals)
    splits = [s for s in ("C_leaked", "C_not_leaked", "U") if any(s in evals[st] for st in stages)]
    rows = []
    for sp in splits:
        row: dict[str, Any] = {"split": sp, "n": next(evals[st][sp]["n"] for st in stages if sp in evals[st])}
        for st in stages:
            row[st] = evals[st].get(sp, {}).get("acc")
            row[f"{st}_malformed"] = evals[st].get(sp, {}).get("malformed")
        first, last = row.get(stages[0]), row.get(stages[-1])
        row["delta"] = None if first is None or last is None else last - first
        rows.append(row)
    return {"stages": stages, "rows": rows}


def table6_markdown(t: Mapping[str, Any]) -> str:
    """The Table 6 analogue as markdown (accuracy in %)."""
    names = {"base": "Before", "after_sft": "After SFT", "final": "After (final)"}
    st = t["stages"]
    head = "| Split | N | " + " | ".join(names.get(s, s) for s in st) + " | Δ |"
    lines = ["Full-CoT greedy accuracy (%) before and after contamination.", "", head,
             "|" + "---|" * (len(st) + 3)]
    pct = lambda v: "–" if v is None else f"{100 * v:.1f}"  # noqa: E731
    for r in t["rows"]:
        d = "–" if r["delta"] is None else f"{100 * r['delta']:+.1f}"
        lines.append(f"| {r['split']} | {r['n']} | " + " | ".join(pct(r[s]) for s in st) + f" | {d} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- pipeline
def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _barrier() -> None:
    """Wait for all ranks under `accelerate launch`/`torchrun`; a no-op in a single process."""
    if _distributed():
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def _tracker(cfg: Mapping[str, Any], run_cfg: Mapping[str, Any], run_dir: Path, job_type: str) -> Any:
    from zcp.tracking import Tracker

    lcfg = dict(cfg.get("logger") or {"enabled": False})
    lcfg.setdefault("group", cfg.get("name") or run_dir.name)
    if not _is_main():
        lcfg["enabled"] = False
    return Tracker(lcfg, run_config=run_cfg, run_dir=str(run_dir), job_type=job_type,
                   name=f"{lcfg['group']}-{job_type}")


def _save_merged(model: Any, tokenizer: Any, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("zcp", "torch", "transformers", "trl", "peft"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def contaminate(cfg: Any) -> ContaminationResult:
    """Run split → paraphrase → SFT → GRPO → merge → Table 6 into the run dir; resumable; see module doc.

    The main process holds the run directory's lock throughout: a second run on the same directory
    refuses at once (the other ranks of a distributed run share the directory with it).
    """
    import contextlib

    c = _to_dict(cfg)
    fingerprint = _config_fingerprint(c)  # hashes the base model's files once per run
    run_dir = _run_dir(c, fingerprint).resolve()
    with RunLock(run_dir) if _is_main() else contextlib.nullcontext():
        return _contaminate(c, fingerprint, run_dir)


def _contaminate(c: dict[str, Any], fingerprint: dict[str, Any], run_dir: Path) -> ContaminationResult:
    seed = int(c.get("seed", 0))
    seed_everything(seed)
    ex = dict(c["exposure"])
    train = dict(c.get("train") or {})
    mcfg = dict(c.get("model") or {})
    ecfg = dict(c.get("eval") or {})
    base_path = resolve_model_path(mcfg.get("path"))
    trc = bool(mcfg.get("trust_remote_code", False))
    dtype = mcfg.get("dtype") or "auto"
    chat = bool(mcfg.get("chat", True))
    cpu = not _cuda()
    threads = train.get("torch_threads")
    if threads:
        # Tiny models on a shared CPU: one thread avoids OpenMP spin contention (10-100x faster here).
        import torch

        torch.set_num_threads(int(threads))
    if _distributed():
        from accelerate import PartialState

        PartialState()  # sets up the process group so the barriers below work before any trainer exists
    stages_run: list[str] = []
    stages_skipped: list[str] = []

    if _is_main():
        _fingerprint_check(run_dir, c, fingerprint)
    _barrier()

    # 1. data ---------------------------------------------------------------------------------------
    items = load_benchmark(c)
    manifest = _manifest(c, items, run_dir, seed) if _is_main() else None
    _barrier()
    if manifest is None:
        from zcp.data.split import Manifest

        manifest = Manifest.load(run_dir / "manifest.json")
    sft_path = run_dir / "sft_data.jsonl"
    if sft_path.exists():
        stages_skipped.append("data")
    elif _is_main():
        teacher = None
        tpath = (c.get("cot") or {}).get("teacher")
        if tpath:
            from zcp.backends.hf import HFBackend

            teacher = HFBackend.from_pretrained(resolve_model_path(tpath), trust_remote_code=trc)
        build_training_data(c, items, manifest, run_dir, seed, teacher)
        stages_run.append("data")
    _barrier()
    sft_records = list(read_jsonl(sft_path))
    ctk = mcfg.get("chat_template_kwargs")
    if ctk:
        for r in sft_records:
            r["chat_template_kwargs"] = dict(ctk)
    grpo_records = list(read_jsonl(run_dir / "grpo_data.jsonl"))
    counts = read_json(run_dir / "data_counts.json")
    leaked_ids = sorted({r["original_id"] for r in sft_records if r["source"] == "benchmark"})
    c_items, u_items = manifest.subset(items, "C"), manifest.subset(items, "U")
    leaked_set = set(leaked_ids)
    splits = {
        "C_leaked": _eval_subset([it for it in c_items if it.id in leaked_set], ecfg.get("max_items")),
        "C_not_leaked": _eval_subset([it for it in c_items if it.id not in leaked_set], ecfg.get("max_items")),
        "U": _eval_subset(u_items, ecfg.get("max_items")),
    }

    tokenizer = load_tokenizer(base_path, trust_remote_code=trc)
    run_cfg = {**c, "exposure": ex}
    evals: dict[str, dict[str, Any]] = {}
    do_eval = bool(ecfg.get("enabled", True)) and _is_main()

    def base_model() -> Any:
        return load_model(base_path, dtype=dtype, trust_remote_code=trc)

    # 2. accuracy before -----------------------------------------------------------------------------
    if do_eval:
        evals["base"], ran = _evaluate_stage("base", base_model, tokenizer, splits, run_dir, ecfg, chat)
        (stages_run if ran else stages_skipped).append("eval_base")
    _barrier()

    # 3. SFT ----------------------------------------------------------------------------------------
    lora = {**dict(train.get("lora") or {}), "r": int(ex["lora_r"])}
    sft_settings = {**dict(train.get("sft") or {}), "num_train_epochs": float(ex["sft_epochs"]),
                    "learning_rate": float(ex["lr"])}
    sft_dir = run_dir / "sft_adapter"
    from zcp.training.grpo import merge_adapter, run_grpo
    from zcp.training.sft import run_sft

    if adapter_done(sft_dir):
        stages_skipped.append("sft")
    else:
        t0 = time.time()
        tracker = _tracker(c, run_cfg, run_dir, "sft")
        try:
            run_sft(base_model(), tokenizer, sft_records, output_dir=run_dir / "sft", adapter_dir=sft_dir,
                    lora=lora, settings=sft_settings, seed=seed, report_to="wandb" if tracker.enabled else "none",
                    cpu=cpu)
        finally:
            tracker.finish()
        stages_run.append("sft")
        log.info("SFT done in %.1fs", time.time() - t0)

    def sft_merged() -> Any:
        return merge_adapter(base_model(), sft_dir)

    # 4. GRPO ---------------------------------------------------------------------------------------
    grpo_steps = int(ex.get("grpo_steps", 0))
    grpo_dir = run_dir / "grpo_adapter" if grpo_steps > 0 else None
    if grpo_dir is None or adapter_done(grpo_dir):
        stages_skipped.append("grpo")
    else:
        grpo_settings = {**dict(train.get("grpo") or {}), "max_steps": grpo_steps}
        if ctk:
            grpo_settings["chat_template_kwargs"] = dict(ctk)
        grpo_lora = {**dict(train.get("grpo_lora") or train.get("lora") or {}), "r": int(ex["lora_r"])}
        tracker = _tracker(c, run_cfg, run_dir, "grpo")
        try:
            run_grpo(sft_merged(), tokenizer, grpo_records, output_dir=run_dir / "grpo", adapter_dir=grpo_dir,
                     lora=grpo_lora, settings=grpo_settings, seed=seed,
                     report_to="wandb" if tracker.enabled else "none", cpu=cpu)
        finally:
            tracker.finish()
        stages_run.append("grpo")

    # 5. merged final model --------------------------------------------------------------------------
    model_dir = run_dir / "model"

    def final_model() -> Any:
        m = sft_merged()
        return merge_adapter(m, grpo_dir) if grpo_dir is not None else m

    if (model_dir / "config.json").is_file():
        stages_skipped.append("merge")
    elif _is_main():
        _save_merged(final_model(), tokenizer, model_dir)
        stages_run.append("merge")
    _barrier()

    # 6. accuracy after, Table 6, exposure record ----------------------------------------------------
    if do_eval:
        if grpo_dir is not None and ecfg.get("after_sft", True):
            evals["after_sft"], ran = _evaluate_stage("after_sft", sft_merged, tokenizer, splits, run_dir, ecfg, chat)
            (stages_run if ran else stages_skipped).append("eval_after_sft")
        evals["final"], ran = _evaluate_stage(
            "final", lambda: load_model(model_dir, dtype=dtype, trust_remote_code=trc), tokenizer, splits,
            run_dir, ecfg, chat)
        (stages_run if ran else stages_skipped).append("eval_final")
    t6 = table6(evals) if evals else {"stages": [], "rows": []}
    exposure_path = run_dir / "exposure.json"
    manifest_path = run_dir / "manifest.json"
    if _is_main():
        write_json(run_dir / "table6.json", t6)
        (run_dir / "table6.md").write_text(table6_markdown(t6) if evals else "evaluation disabled\n")
        exposure = {
            "schema": EXPOSURE_SCHEMA,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seed": seed,
            "seeds": {"run": seed, "split": _or((c.get("split") or {}).get("seed"), seed), "leak": seed,
                      "paraphrase": seed, "format_mix": seed, "clean": _or((c.get("clean") or {}).get("seed"), seed + 1),
                      "sft": seed, "grpo": seed},
            "knobs": {
                "k": int(ex["k"]), "sft_epochs": float(ex["sft_epochs"]),
                "leak_fraction": float(ex.get("leak_fraction", 1.0)),
                "answer_only_fraction": float(ex.get("answer_only_fraction", 0.0)),
                "lora_r": int(ex["lora_r"]), "grpo_steps": grpo_steps,
                "clean_fraction": float(ex.get("clean_fraction", 0.0)), "lr": float(ex["lr"]),
                "paraphraser": ex.get("paraphraser", "auto"), "include_original": bool(ex.get("include_original", False)),
                "grpo_prompts": ex.get("grpo_prompts", "variants"),
            },
            "base_model": base_path,
            "base_model_fingerprint": fingerprint["base_model_fingerprint"],
            "model_dir": str(model_dir),
            "sft_adapter": str(sft_dir),
            "sft_adapter_base": base_path,
            "grpo_adapter": str(grpo_dir) if grpo_dir is not None else None,
            "grpo_adapter_base": "base_model with sft_adapter merged" if grpo_dir is not None else None,
            "manifest": str(manifest_path),
            "manifest_sha256": sha256_file(manifest_path),
            "benchmark_items": str(run_dir / "benchmark_items.jsonl"),
            "variants": str(run_dir / "variants.jsonl"),
            "sft_data": str(sft_path),
            "benchmark": c.get("benchmark"),
            "leaked_ids": leaked_ids,
            "c_not_leaked_ids": sorted(set(manifest.c_ids) - leaked_set),
            "u_ids": sorted(manifest.u_ids),
            "counts": counts,
            "training": {"lora": lora, "sft": sft_settings,
                         "grpo": {**dict(train.get("grpo") or {}), "max_steps": grpo_steps} if grpo_dir else None},
            "table6": str(run_dir / "table6.json"),
            "config_hash": stable_hash(json.dumps({k: v for k, v in c.items() if k not in _NOT_FINGERPRINTED},
                                                  sort_keys=True, default=str)),
            "versions": _versions(),
        }
        write_json(exposure_path, exposure)
        tracker = _tracker(c, run_cfg, run_dir, "contaminate")
        try:
            tracker.table("table6", t6["rows"])
            tracker.summary({f"acc/{r['split']}/{s}": r[s] for r in t6["rows"] for s in t6["stages"]})
            tracker.summary({f"exposure/{k}": v for k, v in exposure["knobs"].items()})
            tracker.artifact(f"contamination-{stable_hash(str(run_dir), 8)}", "contamination",
                             [str(exposure_path), str(manifest_path), str(run_dir / "table6.json"),
                              str(run_dir / "table6.md")])
        finally:
            tracker.finish()
        print(f"\n{table6_markdown(t6) if evals else ''}\nexposure record: {exposure_path}\n"
              f"contaminated model: {model_dir}")
    _barrier()
    return ContaminationResult(run_dir=run_dir, model_dir=model_dir, sft_adapter_dir=sft_dir,
                               grpo_adapter_dir=grpo_dir, manifest_path=manifest_path, exposure_path=exposure_path,
                               table6=t6, leaked_ids=leaked_ids, stages_run=stages_run,
                               stages_skipped=stages_skipped)


def load_exposure(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check an `exposure.json` (or the run dir holding one); raises DataError when malformed."""
    p = Path(path)
    if p.is_dir():
        p = p / "exposure.json"
    try:
        rec = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"cannot read exposure record ({e})", path=str(p)) from e
    for key in ("schema", "knobs", "leaked_ids", "model_dir", "manifest", "base_model"):
        if key not in rec:
            raise DataError("missing key", path=str(p), field=key)
    if rec["schema"] != EXPOSURE_SCHEMA:
        raise DataError(f"unsupported schema {rec['schema']}", path=str(p), field="schema")
    return rec


def result_dict(r: ContaminationResult) -> dict[str, Any]:
    """A JSON-ready view of a ContaminationResult."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(r).items()}
