"""The contamination simulation: C/U split → paraphrase C → LoRA SFT → GRPO → merged model + exposure record.

`contaminate(cfg)` runs the whole pipeline into one run directory and is resumable. The pipeline is a list
of named stages (split, data, eval_base, the training stages of `train.stages` in order (default sft, grpo:
`zcp.simulate.training_stages`, each a LoRA trained on the model so far), merge, eval_after_sft, eval_final;
`_Pipeline.stages`), each with a done-check and a run step, run by `zcp.simulate.stages.run_stages`, which owns
skipping, barriers and logging: every stage writes its final output atomically and is skipped when that output
exists; a trainer killed mid-stage resumes from its newest checkpoint. The run directory holds

* ``manifest.json`` (C/U ids), ``benchmark_items.jsonl``, ``variants.jsonl`` (the paraphrases trained on),
  ``sft_data.jsonl`` / ``grpo_data.jsonl`` (the exact training examples, with format and source),
  ``training_items.jsonl`` (every non-benchmark item trained on: clean and sham items, `training_items`);
* ``<stage>_adapter/`` per training stage: ``sft_adapter/`` (LoRA on the base), ``grpo_adapter/`` (LoRA on
  base+SFT merged), ``model/`` (the final merged model, safetensors + tokenizer);
* ``exposure.json``: every knob, the seeds, the leaked C ids and the paths detection needs;
* ``table6.md`` / ``table6.json``: full-CoT greedy accuracy before/after on C (leaked, not leaked) and U,
  with per-item records under ``eval/``.

``exposure.leak_fraction=0`` is the **sham arm**, the negative control: the training data of a full leak of the
same recipe (k paraphrases, CoTs, format mix, clean mix, GRPO prompts) built on `exposure.sham_items` fresh
non-benchmark items instead of C (`build_training_data`), so a detector that flags its C or U is a false
positive of fine-tuning itself. Its records say ``source: sham``, its exposure record ``arm: sham``.

The run is split along its seams; this module is the orchestration (stages, exposure record, W&B) and re-exports
the public names of the others, so `zcp.simulate.contaminate.X` keeps working:

* `zcp.simulate.settings`: the config as the job reads it (`SimConfig`: validated groups, plain values);
* `zcp.simulate.rundir`: fingerprint, run dir, resume check, model paths;
* `zcp.simulate.benchmark`: the benchmark and its C/U split (manifest);
* `zcp.simulate.training_data`: the data stage (leak, sham and clean items, SFT/GRPO records);
* `zcp.simulate.evaluation`: the Table 6 analogue;
* `zcp.simulate.checks`: what is checked before any model loads, and the trainer settings.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zcp.core.io import RunLock, read_json, read_jsonl, seed_everything, sha256_file, stable_hash, write_json
from zcp.core.items import Item
from zcp.core.rundir import BENCHMARK_ITEMS, EXPOSURE, MANIFEST, MODEL  # the run dir's files, named once
from zcp.errors import DataError
from zcp.simulate.benchmark import (  # noqa: F401  (re-exported)
    _manifest,
    benchmark_format,
    generated_benchmark,
    load_benchmark,
    load_split_files,
    planned_manifest,
    write_manifest,
)
from zcp.simulate.checks import (  # noqa: F401  (re-exported)
    GRPO_FIX,
    MIN_FREE_MARGIN,
    SFT_FIX,
    _benchmark_and_c_size,
    _grpo_reward_settings,
    _reward_names,
    _sft_settings,
    check_base_model,
    check_exposure_counts,
    check_inputs,
    check_run_dir_writable,
    max_sft_examples,
    min_free_bytes,
    processes,
    schedules,
)
from zcp.simulate.evaluation import (  # noqa: F401  (re-exported)
    cuda,
    eval_subset,
    evaluate_stage,
    full_cot_eval,
    table6,
    table6_markdown,
)
from zcp.simulate.rundir import (  # noqa: F401  (re-exported)
    _NOT_FINGERPRINTED,
    DEFAULT_REWARDS,
    _canonical,
    _config_fingerprint,
    _fingerprint_check,
    _run_dir,
    is_sham,
    resolve_model_path,
    shipped_base_model,
)
from zcp.simulate.settings import SimConfig, sim_config
from zcp.simulate.sft import adapter_done, load_model, load_tokenizer
from zcp.simulate.stages import Stage, run_stages
from zcp.simulate.training_data import (  # noqa: F401  (re-exported)
    SHAM_PREFIX,
    TRAINING_ITEMS,
    backfill_training_items,
    build_training_data,
    check_leak_count,
    choose_leaked,
    n_clean_examples,
    n_leaked,
    sham_seed,
    sham_training_items,
    training_items,
)
from zcp.simulate.training_stages import StageRun, TrainingStage, adapter_dir, configured_stages
from zcp.simulate.training_stages.grpo import grpo_training

EXPOSURE_SCHEMA = 1


@dataclass
class ContaminationResult:
    """Where a contamination run put its outputs, and what it measured."""

    run_dir: Path
    model_dir: Path
    sft_adapter_dir: Path | None  # None when train.stages has no sft
    grpo_adapter_dir: Path | None  # None when GRPO did not run (exposure.grpo_steps=0, or not in train.stages)
    manifest_path: Path
    exposure_path: Path
    table6: dict[str, Any]
    leaked_ids: list[str]
    stages_run: list[str] = field(default_factory=list)
    stages_skipped: list[str] = field(default_factory=list)
    arm: str = "leak"  # leak | sham (exposure.leak_fraction=0: nothing of C trained on)
    adapters: dict[str, Path] = field(default_factory=dict)  # training stage -> its adapter, in training order


# ---------------------------------------------------------------------------------------------- processes
def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _barrier() -> None:
    """Wait for all ranks under `accelerate launch`/`torchrun`; a no-op in a single process."""
    if _distributed():
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def _tracker(s: SimConfig, run_dir: Path, job_type: str) -> Any:
    """The W&B tracker of one job of the run (`logger.*`; group: logger.group, null = the run's name), logging the
    plain config; off on every rank but the main one."""
    from zcp.core.tracking import Tracker

    lcfg = asdict(s.logger)
    if lcfg["group"] is None:
        lcfg["group"] = s.name or run_dir.name
    if not _is_main():
        lcfg["enabled"] = False
    return Tracker(lcfg, run_config=s.values, run_dir=str(run_dir), job_type=job_type,
                   name=f"{lcfg['group']}-{job_type}")


def _save_merged(model: Any, tokenizer: Any, dest: Path) -> None:
    """Save the merged model through a temporary folder; a failed write names `dest` (`zcp.core.io.as_write_error`)."""
    from zcp.core.io import naming_write_errors

    tmp = dest.with_name(dest.name + ".tmp")
    with naming_write_errors(dest):
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


# ---------------------------------------------------------------------------------------------- the run
def contaminate(cfg: Any) -> ContaminationResult:
    """Run split → data → SFT → GRPO → merge → Table 6 into the run dir; resumable; see module doc.

    `cfg`: the config (a DictConfig, a mapping, or a `zcp.simulate.settings.SimConfig`), read through the
    validated groups of `zcp.simulate.simulation_config.SimulationJob`. The stages (`pipeline_stages`) run through
    `zcp.simulate.stages.run_stages`, which skips finished ones. The main process holds the run directory's
    lock throughout: a second run on the same directory refuses at once (the other ranks of a distributed run
    share the directory with it). Bad input (an unknown answer format or reward, a missing file, an LLM
    paraphraser without a model) fails with one line before any model loads.
    """
    import contextlib

    s = sim_config(cfg)
    check_inputs(s)
    fingerprint = _config_fingerprint(s)  # hashes the base model's files once per run
    run_dir = _run_dir(s, fingerprint).resolve()
    if _is_main():
        check_run_dir_writable(s, run_dir)
    with RunLock(run_dir) if _is_main() else contextlib.nullcontext():
        return _contaminate(s, fingerprint, run_dir)


def pipeline_stages(cfg: Any, run_dir: str | os.PathLike[str] | None = None) -> list[Stage]:
    """The named stages of the contamination run `cfg` would make (for inspection: `done()` of each)."""
    s = sim_config(cfg)
    fp = _config_fingerprint(s)
    return _Pipeline(s, fp, Path(run_dir) if run_dir else _run_dir(s, fp).resolve()).stages()


def _contaminate(s: SimConfig, fingerprint: dict[str, Any], run_dir: Path) -> ContaminationResult:
    p = _Pipeline(s, fingerprint, run_dir)
    seed_everything(p.seed)
    threads = p.train.torch_threads
    if threads:
        # Tiny models on a shared CPU: one thread avoids OpenMP spin contention (10-100x faster here).
        import torch

        torch.set_num_threads(int(threads))
    if _distributed():
        from accelerate import PartialState

        PartialState()  # sets up the process group so the barriers below work before any trainer exists
    if _is_main():
        _fingerprint_check(run_dir, s, fingerprint)
    _barrier()
    done = run_stages(p.stages(), is_main=_is_main(), barrier=_barrier)
    leaked_ids = p.leaked_ids()
    t6 = p.write_report(leaked_ids) if _is_main() else table6(p.evals())
    _barrier()
    return ContaminationResult(run_dir=run_dir, model_dir=p.model_dir, sft_adapter_dir=p.sft_dir,
                               grpo_adapter_dir=p.grpo_dir, manifest_path=p.manifest_path,
                               exposure_path=run_dir / EXPOSURE, table6=t6, leaked_ids=leaked_ids,
                               stages_run=done.run, stages_skipped=done.skipped, arm=p.arm,
                               adapters=dict(p.adapters))


class _Pipeline:
    """The state one contamination run shares between its stages (read lazily from the run directory)."""

    def __init__(self, c: Any, fingerprint: dict[str, Any], run_dir: Path) -> None:
        self.s = s = sim_config(c)
        self.c = s.values  # the plain config: W&B's run config, exposure.json's record of the benchmark
        self.fingerprint, self.run_dir = fingerprint, run_dir
        self.seed = s.seed
        self.ex = s.exposure
        self.train = s.train
        self.ecfg = s.eval
        self.base_path = resolve_model_path(s.model.path)
        self.trc = bool(s.model.trust_remote_code)
        self.dtype = s.model.dtype
        self.chat = bool(s.model.chat)
        self.ctk = s.model.chat_template_kwargs
        self.do_eval = bool(s.eval.enabled)
        self.grpo_steps = int(s.exposure.grpo_steps)
        self.lora = {**asdict(s.train.lora), "r": int(s.exposure.lora_r)}
        self.sft_settings = _sft_settings(s)
        # the training stages in train.stages order; those that run (GRPO at 0 steps does not), and their adapters
        self.training_stages = configured_stages(s)
        self.trained = [st.name for st in self.training_stages if st.is_enabled(s)]
        self.adapters = {name: adapter_dir(run_dir, name) for name in self.trained}
        self.sft_dir = self.adapters.get("sft")
        self.grpo_dir = self.adapters.get("grpo")
        self.model_dir = run_dir / MODEL
        self.sft_path = run_dir / "sft_data.jsonl"
        self.manifest_path = run_dir / MANIFEST
        self._items: list[Item] | None = None
        self._tokenizer: Any = None

    # ------------------------------------------------------------------------------ shared state
    def items(self) -> list[Item]:
        if self._items is None:
            self._items = load_benchmark(self.s)
        return self._items

    def manifest(self) -> Any:
        from zcp.benchmarks.split import Manifest

        return Manifest.load(self.manifest_path)

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.base_path, trust_remote_code=self.trc)
        return self._tokenizer

    def leaked_ids(self) -> list[str]:
        return sorted({r["original_id"] for r in read_jsonl(self.sft_path) if r["source"] == "benchmark"})

    @property
    def arm(self) -> str:
        """leak, or sham (exposure.leak_fraction=0: nothing of C trained on)."""
        return "sham" if is_sham(self.ex) else "leak"

    def eval_splits(self) -> dict[str, list[Item]]:
        manifest, items = self.manifest(), self.items()
        c_items, u_items = manifest.subset(items, "C"), manifest.subset(items, "U")
        mx = self.ecfg.max_items
        if self.arm == "sham":  # nothing of C leaked: C is one split
            return {"C": eval_subset(c_items, mx), "U": eval_subset(u_items, mx)}
        leaked = set(self.leaked_ids())
        return {
            "C_leaked": eval_subset([it for it in c_items if it.id in leaked], mx),
            "C_not_leaked": eval_subset([it for it in c_items if it.id not in leaked], mx),
            "U": eval_subset(u_items, mx),
        }

    def base_model(self) -> Any:
        return load_model(self.base_path, dtype=self.dtype, trust_remote_code=self.trc)

    def model_with(self, n: int) -> Any:
        """The base model with the adapters of the first `n` training stages that run merged, in order (the model
        the next stage trains on; all of them: the final model)."""
        from zcp.simulate.grpo import merge_adapter

        model = self.base_model()
        for name in self.trained[:n]:
            model = merge_adapter(model, self.adapters[name])
        return model

    def final_model(self) -> Any:
        return self.model_with(len(self.trained))

    @property
    def after_sft(self) -> bool:
        """Whether Table 6 has an after-SFT column: eval.after_sft, and a training stage runs after SFT."""
        return (self.do_eval and bool(self.ecfg.after_sft) and "sft" in self.trained
                and self.trained[-1] != "sft")

    def sft_merged(self) -> Any:
        """The model after the SFT stage (the base with the adapters up to and including SFT's merged)."""
        return self.model_with(self.trained.index("sft") + 1)

    def adapter_base(self, name: str) -> str | None:
        """What training stage `name`'s adapter was trained on (exposure.json): the base model for the first stage,
        else the base with the earlier stages' adapters merged; None for a stage that did not run."""
        if name not in self.trained:
            return None
        earlier = self.trained[:self.trained.index(name)]
        if not earlier:
            return self.base_path
        return f"base_model with {' and '.join(f'{n}_adapter' for n in earlier)} merged"

    # ------------------------------------------------------------------------------ stage steps
    def split_done(self) -> bool:
        src = self.s.manifest_path
        if src and self.manifest_path.exists():
            return sha256_file(resolve_model_path(src)) == sha256_file(self.manifest_path)
        return self.manifest_path.exists()

    def run_split(self) -> None:
        write_manifest(self.s, self.items(), self.run_dir, self.seed)

    def data_done(self) -> bool:
        """The data stage's outputs exist: sft_data.jsonl (written last) and training_items.jsonl (a run dir made
        before that file existed reruns the stage, which then only writes it: `backfill_training_items`)."""
        return self.sft_path.exists() and (self.run_dir / TRAINING_ITEMS).exists()

    def run_data(self) -> None:
        if self.sft_path.exists():  # an older run's finished data stage: keep its training data (and adapters)
            backfill_training_items(self.s, self.items(), self.run_dir, self.seed)
            return
        check_exposure_counts(self.s, self.items(), len(self.manifest().c_ids))  # before a teacher model loads
        teacher = None
        tpath = self.s.cot.teacher
        if tpath:
            from zcp.backends.registry import build_backend

            teacher = build_backend({"path": resolve_model_path(tpath), "trust_remote_code": self.trc})
        build_training_data(self.s, self.items(), self.manifest(), self.run_dir, self.seed, teacher)

    def eval_done(self, stage: str) -> bool:
        return (self.run_dir / "eval" / f"{stage}.json").exists()

    def run_eval(self, stage: str, model_fn: Any) -> None:
        evaluate_stage(stage, model_fn, self.tokenizer(), self.eval_splits(), self.run_dir, self.ecfg, self.chat,
                       self.ctk)

    def run_training(self, stage: TrainingStage) -> None:
        """Run training stage `stage` (`zcp.simulate.training_stages`) on the model so far: the base with the
        adapters of the stages before it merged; its builder saves and returns its adapter folder."""
        name = stage.name
        run = StageRun(name=name, config=self.s, run_dir=self.run_dir, data_path=stage.data_path(self.s, self.run_dir),
                       seed=self.seed, cpu=not cuda(), lora=self.lora,
                       model=lambda: self.model_with(self.trained.index(name)), tokenizer=self.tokenizer(),
                       tracker=lambda: _tracker(self.s, self.run_dir, name))
        try:
            out = stage.builder(run)
        finally:
            run.finish()
        if out is None or Path(out).resolve() != run.adapter_dir.resolve() or not adapter_done(run.adapter_dir):
            raise RuntimeError(f"training stage {name}: its builder returned {out!r}, not its adapter folder "
                               f"{run.adapter_dir} with a saved adapter (adapter_model.safetensors, adapter_config.json)")

    def run_merge(self) -> None:
        _save_merged(self.final_model(), self.tokenizer(), self.model_dir)

    def stages(self) -> list[Stage]:
        """The pipeline as named stages, in order (see `zcp.simulate.stages`)."""
        training = [Stage(st.name, lambda d=adapter_dir(self.run_dir, st.name): adapter_done(d),
                          lambda st=st: self.run_training(st), enabled=st.name in self.adapters)
                    for st in self.training_stages]
        return [
            Stage("split", self.split_done, self.run_split, main_only=True),
            Stage("data", self.data_done, self.run_data, main_only=True),
            Stage("eval_base", lambda: self.eval_done("base"), lambda: self.run_eval("base", self.base_model),
                  main_only=True, enabled=self.do_eval),
            *training,
            Stage("merge", lambda: (self.model_dir / "config.json").is_file(), self.run_merge, main_only=True),
            Stage("eval_after_sft", lambda: self.eval_done("after_sft"),
                  lambda: self.run_eval("after_sft", self.sft_merged), main_only=True, enabled=self.after_sft),
            Stage("eval_final", lambda: self.eval_done("final"),
                  lambda: self.run_eval("final", lambda: load_model(self.model_dir, dtype=self.dtype,
                                                                    trust_remote_code=self.trc)),
                  main_only=True, enabled=self.do_eval),
        ]

    # ------------------------------------------------------------------------------ report
    def evals(self) -> dict[str, dict[str, Any]]:
        """Table 6 inputs: the cached accuracy summaries of the evaluation stages that are enabled."""
        if not self.do_eval:
            return {}
        names = ["base"]
        if self.after_sft:
            names.append("after_sft")
        names.append("final")
        return {n: read_json(self.run_dir / "eval" / f"{n}.json") for n in names}

    def exposure_record(self, leaked_ids: list[str]) -> dict[str, Any]:
        """exposure.json: every knob, the seeds, the ids by role, the paths detection needs, the training settings."""
        s, ex, seed = self.s, self.ex, self.seed
        run_dir, manifest_path = self.run_dir, self.manifest_path
        manifest = self.manifest()
        names, grpo_settings, _ = grpo_training(s)
        counts = read_json(run_dir / "data_counts.json")
        sham = self.arm == "sham"
        return {
            "schema": EXPOSURE_SCHEMA,
            "arm": self.arm,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seed": seed,
            "seeds": {"run": seed, "split": s.split_seed, "leak": seed, "paraphrase": seed, "format_mix": seed,
                      "clean": seed + 1 if s.clean.seed is None else int(s.clean.seed),
                      "sft": seed, "grpo": seed, **({"sham": sham_seed(seed)} if sham else {})},
            "knobs": {
                "k": int(ex.k), "sft_epochs": float(ex.sft_epochs),
                "leak_fraction": float(ex.leak_fraction),
                "answer_only_fraction": float(ex.answer_only_fraction),
                "answer_format": str(ex.answer_format),
                "lora_r": int(ex.lora_r), "grpo_steps": self.grpo_steps,
                # full fine-tuning: lora_r above is then unused (stated only where it differs from the LoRA default,
                # so every earlier run's exposure.json is unchanged)
                **({"finetune": str(self.train.finetune)} if self.train.finetune != "lora" else {}),
                "clean_fraction": float(ex.clean_fraction), "lr": float(ex.lr),
                "paraphraser": ex.paraphraser, "include_original": bool(ex.include_original),
                "paraphrases_path": ex.paraphrases_path,
                "grpo_prompts": ex.grpo_prompts,
                "grpo_rewards": names,
                **({"sham_items": int(counts["n_sham"])} if sham else {}),  # the count trained on (null: |C|)
            },
            "base_model": self.base_path,
            "base_model_fingerprint": self.fingerprint["base_model_fingerprint"],
            "model_dir": str(self.model_dir),
            "sft_adapter": str(self.sft_dir) if self.sft_dir is not None else None,
            "sft_adapter_base": self.adapter_base("sft"),
            "grpo_adapter": str(self.grpo_dir) if self.grpo_dir is not None else None,
            "grpo_adapter_base": self.adapter_base("grpo"),
            # every training stage that ran, in order: its adapter and what it was trained on (train.stages)
            "training_stages": [{"stage": n, "adapter": str(self.adapters[n]), "base": self.adapter_base(n)}
                                for n in self.trained],
            "manifest": str(manifest_path),
            "manifest_sha256": sha256_file(manifest_path),
            "split_files": {"c_path": s.split.c_path, "u_path": s.split.u_path},
            "benchmark_items": str(run_dir / BENCHMARK_ITEMS),
            "variants": str(run_dir / "variants.jsonl"),
            "sft_data": str(self.sft_path),
            "benchmark": self.c.get("benchmark"),  # the benchmark section as the config gave it
            "training_items": str(run_dir / TRAINING_ITEMS),
            "leaked_ids": leaked_ids,
            "c_not_leaked_ids": sorted(set(manifest.c_ids) - set(leaked_ids)),
            "u_ids": sorted(manifest.u_ids),
            "sham_ids": sorted(it.id for it in training_items(run_dir, "sham")) if sham else [],
            "counts": counts,
            "training": {"lora": self.lora, "sft": self.sft_settings if self.sft_dir else None,
                         "grpo": grpo_settings if self.grpo_dir else None,
                         # optimizer steps, warmup, steps at a learning rate > 0 (zcp.simulate.sft.lr_schedule)
                         "schedules": schedules(s, sum(1 for _ in read_jsonl(self.sft_path)))},
            "table6": str(run_dir / "table6.json"),
            "config_hash": stable_hash(json.dumps({k: v for k, v in self.c.items() if k not in _NOT_FINGERPRINTED},
                                                  sort_keys=True, default=str)),
            "versions": _versions(),
        }

    def write_report(self, leaked_ids: list[str]) -> dict[str, Any]:
        """table6.{json,md}, exposure.json and the W&B summary/artifact; returns Table 6."""
        evals = self.evals()
        t6 = table6(evals) if evals else {"stages": [], "rows": []}
        run_dir, manifest_path, exposure_path = self.run_dir, self.manifest_path, self.run_dir / EXPOSURE
        write_json(run_dir / "table6.json", t6)
        (run_dir / "table6.md").write_text(table6_markdown(t6) if evals else "evaluation disabled\n")
        exposure = self.exposure_record(leaked_ids)
        write_json(exposure_path, exposure)
        tracker = _tracker(self.s, run_dir, "contaminate")
        try:
            tracker.table("table6", t6["rows"])
            tracker.summary({f"acc/{r['split']}/{s}": r[s] for r in t6["rows"] for s in t6["stages"]})
            tracker.summary({f"exposure/{k}": v for k, v in exposure["knobs"].items()})
            tracker.summary({"arm": self.arm})
            tracker.artifact(f"contamination-{stable_hash(str(run_dir), 8)}", "contamination",
                             [str(exposure_path), str(manifest_path), str(run_dir / "table6.json"),
                              str(run_dir / "table6.md")])
        finally:
            tracker.finish()
        sham = self.arm == "sham"
        n_sham = exposure["counts"]["n_sham"] if sham else 0
        arm = f"sham run: nothing of C leaked, {n_sham} sham items trained on instead\n" if sham else ""
        print(f"\n{table6_markdown(t6) if evals else ''}\n{arm}exposure record: {exposure_path}\n"
              f"{'fine-tuned' if sham else 'contaminated'} model: {self.model_dir}")
        return t6


# ---------------------------------------------------------------------------------------------- records
def load_exposure(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check an `exposure.json` (or the run dir holding one); raises DataError when malformed."""
    p = Path(path)
    if p.is_dir():
        p = p / EXPOSURE
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
    """A JSON-ready view of a ContaminationResult (paths as strings, the adapters' too)."""
    out = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(r).items()}
    out["adapters"] = {k: str(v) for k, v in r.adapters.items()}
    return out
