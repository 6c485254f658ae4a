"""Difference-in-differences (zcp.probe.did): the moved computation reproduces the simulation's old one exactly, and
run_detect with base_model.path probes the base model on the same units into <out>/base/ and writes did.md and
summary.json's `did` block; a base that is the audited model gives exactly no DiD; a bad base path fails in one
line before anything loads."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from configs import compose

from zcp.benchmarks.loaders import save_items
from zcp.core.io import read_jsonl, write_jsonl
from zcp.core.items import Item
from zcp.probe.detect import DetectSettings, distinct_draws, item_draws
from zcp.probe.did import did_between, did_markdown, did_rows, did_verdicts, without_null_base
from zcp.probe.metrics import metric_label
from zcp.probe.report import c_cont_text
from zcp.probe.stats import c_cont, paired_test, pooled_mc_pvalue

METRICS = ["acc", "con", "p_first", "p_all"]


# ------------------------------------------------------------------ the simulation's implementation before the move
# Ported verbatim from zcp/simulate.py (_did_rows, _did_markdown) as of commit ae8681c: the reference the moved
# code must reproduce byte for byte.
def _old_did_rows(runs: dict[str, Path], splits: list[str], metrics: list[str], settings: DetectSettings) -> list[dict]:
    recs = {m: list(read_jsonl(p / "records.jsonl")) for m, p in runs.items()}
    n_seeds = len(settings.seeds)
    rows = []
    for split in splits:
        for metric in metrics:
            def gaps(pick: tuple[int, int] | None, metric: str = metric, split: str = split) -> dict[str, dict]:
                out = {}
                for model, rr in recs.items():
                    s = item_draws([r for r in rr if r["split"] == split and r["variant"] == "original"], metric)
                    ref = item_draws(distinct_draws([r for r in rr if r["split"] == split and r["variant"] == "reference"]),
                                     metric, pick)
                    out[model] = {i: float(np.mean(s[i])) - float(np.mean(ref[i])) for i in s if i in ref}
                return out

            def test(g: dict[str, dict], seed: int, metric: str = metric) -> Any:
                ids = sorted(set(g["FT"]) & set(g["base"]))
                return paired_test(metric, [g["FT"][i] for i in ids], [g["base"][i] for i in ids], ids=ids,
                                   B=settings.bootstrap_samples, seed=seed, kind="continuous")

            g_all = gaps(None)
            streams = [test(g_all, seed) for seed in settings.seeds]
            p = pooled_mc_pvalue(streams)
            per_seed = []
            for k, seed in enumerate(settings.seeds):
                res = streams[k] if settings.reference_draws == "all" else test(gaps((k, n_seeds)), seed)
                per_seed.append({"seed": seed, "gap_ft": res.s, "gap_base": res.s_ref, "did": res.diff,
                                 "p_value": res.p_value, "c_cont": res.c_cont})
            main = streams[0]
            rows.append({"split": split, "metric": metric, "gap_ft": main.s, "gap_base": main.s_ref, "did": main.diff,
                         "did_std": float(np.std([q["did"] for q in per_seed], ddof=1)) if n_seeds > 1 else 0.0,
                         "p_value": p, "c_cont": c_cont(p), "test": "sign-flip permutation of per-item gap differences",
                         "per_seed": per_seed})
    return rows


def _old_did_markdown(rows: list[dict]) -> str:
    lines = ["| Dataset | Metric | gap FT (S - S_ref) | gap base | DiD | C_cont (DiD > 0) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['split']} | {metric_label(r['metric'])} | {r['gap_ft']:+.3f} | {r['gap_base']:+.3f} | "
                     f"{r['did']:+.3f} ± {r['did_std']:.3f} | {c_cont_text(r['c_cont'], 0.0, False)} |")
    return "\n".join(lines) + "\n"


def _records(rng: random.Random, lift: float, splits: dict[str, int], m: int = 6) -> list[dict]:
    """Hand-made probe records: per item one original and m reference draws, some draws repeated (same prompt
    hash: counted once); `lift` raises the originals' scores (a contaminated model), on split C only."""
    out = []
    for split, n in splits.items():
        for i in range(n):
            oid = f"{split}{i}"
            up = lift if split == "C" else 0.0
            p = min(0.99, rng.uniform(0.1, 0.6) + up)
            out.append({"id": oid, "split": split, "variant": "original", "original_id": oid, "draw": 0,
                        "prompt_hash": f"h{oid}", "gold": "1", "correct": rng.random() < 0.4 + up,
                        "consistent": rng.random() < 0.5 + up, "p_first": p, "p_all": p * rng.uniform(0.7, 1.0)})
            for j in range(m):
                dup = j == m - 1 and i % 3 == 0  # a repeated draw: the same prompt as draw 0
                q = rng.uniform(0.1, 0.6)
                out.append({"id": f"{oid}::ref{j}", "split": split, "variant": "reference", "original_id": oid,
                            "draw": j, "prompt_hash": f"h{oid}r{0 if dup else j}", "gold": "2",
                            "correct": rng.random() < 0.4, "consistent": rng.random() < 0.5, "p_first": q,
                            "p_all": q * rng.uniform(0.7, 1.0)})
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("did")
    rng = random.Random(7)
    sizes = {"C": 14, "U": 11}
    ft, base = _records(rng, 0.3, sizes), _records(rng, 0.0, sizes)
    base = [r for r in base if not (r["split"] == "U" and r["original_id"] == "U3")]  # an item the base lacks
    paths = {"FT": root / "FT", "base": root / "base"}
    for name, recs in (("FT", ft), ("base", base)):
        paths[name].mkdir()
        write_jsonl(paths[name] / "records.jsonl", recs)
    return paths, ft, base


@pytest.mark.parametrize("seeds, draws", [((0,), "all"), ((0, 1, 2), "per_seed"), ((0, 1), "all")])
def test_did_finds_the_contaminated_split_and_equals_the_gap_difference(runs, seeds, draws):
    paths, _, _ = runs
    settings = DetectSettings(seeds=seeds, bootstrap_samples=300, reference_draws=draws, progress=False)
    old = _old_did_rows(paths, ["C", "U"], METRICS, settings)  # the sign-flip test it replaces: same gaps
    new = did_between(paths["FT"], paths["base"], ["C", "U"], METRICS, settings, variants=("original",), label="ft")
    assert len(new) == len(old) == 2 * len(METRICS)
    assert all(r["variant"] == "original" and r["test"].startswith("within-item permutation") for r in new)
    assert [r["n"] for r in new if r["split"] == "U"] == [10] * len(METRICS)  # U3 has no base gap: left out
    for r, o in zip(new, old, strict=True):
        # the displayed gaps are the old ones; with every draw scored by both models, DiD = gap_ft - gap_base
        assert r["gap_ft"] == pytest.approx(o["gap_ft"]) and r["gap_base"] == pytest.approx(o["gap_base"])
        if draws == "all":
            assert r["did"] == pytest.approx(r["gap_ft"] - r["gap_base"])
    by = {(r["split"], r["metric"]): r for r in new}
    assert by[("C", "p_all")]["did"] > 0.15 and by[("C", "p_all")]["p_value"] < 0.05
    assert by[("U", "p_all")]["c_cont"] < 0.9
    assert "| C | P_all |" in did_markdown(new)


def _null_pair(rng: np.random.Generator, n: int, m: int, level: float, base_level: float) -> tuple[list, list]:
    """Records of a model and its base on n items x (1 + m) versions that are exchangeable for both jointly
    (no contamination): per item a latent difficulty; each version's scores for the two models are drawn
    given it, the model at its own level and shape (binary acc, a skewed p_all), the base at another."""
    model, base = [], []
    for i in range(n):
        z = rng.normal()
        for j in range(m + 1):
            variant, draw = ("original", 0) if j == 0 else ("reference", j - 1)
            u = rng.normal()
            pm = 1 / (1 + np.exp(-(2.0 * z + u + level)))
            pb = 1 / (1 + np.exp(-(0.5 * z + 0.3 * u + base_level)))
            for recs, p in ((model, pm), (base, pb)):
                recs.append({"id": f"i{i}::{j}", "split": "D", "variant": variant, "original_id": f"i{i}",
                             "draw": draw, "prompt_hash": f"h{i}-{j}", "gold": str(j),
                             "correct": bool(rng.random() < p), "consistent": bool(rng.random() < p),
                             "p_first": float(p), "p_all": float(p ** 3)})
    return model, base


def test_did_is_at_its_level_when_versions_are_exchangeable_for_both_models():
    """The null the calibration's exact-null pools build: a fine-tune at another level and shape than its base,
    nothing contaminated. The within-item test on per-version differences is exact there; the sign-flip test
    of the per-item gaps it replaced assumed the two gaps exchangeable with each other and was not."""
    rng = np.random.default_rng(3)
    settings = DetectSettings(seeds=(0,), bootstrap_samples=199, progress=False)
    reps, hits = 200, {"acc": 0, "p_all": 0}
    for _ in range(reps):
        model, base = _null_pair(rng, n=40, m=3, level=1.5, base_level=-1.5)
        for r in did_rows(model, base, ["D"], ["acc", "p_all"], settings, label="m"):
            hits[r["metric"]] += r["p_value"] < 0.05
    for metric, h in hits.items():  # 200 replicates at alpha 0.05: > 0.105 is outside any reasonable CI
        assert h / reps <= 0.105, (metric, h / reps)


def test_did_of_a_model_against_itself_is_exactly_zero(runs):
    _, ft, _ = runs
    settings = DetectSettings(seeds=(0, 1), bootstrap_samples=200, progress=False)
    rows = did_rows(ft, ft, ["C", "U"], METRICS, settings, label="model")
    assert rows and all(r["did"] == 0.0 and r["gap_model"] == r["gap_base"] for r in rows)
    assert all(r["p_value"] == 1.0 and r["c_cont"] == 0.5 for r in rows)
    verdicts = did_verdicts(rows, 0.05)
    assert [(v["split"], v["variant"]) for v in verdicts] == [("C", "original"), ("U", "original")]
    assert not any(v["contaminated"] for v in verdicts)
    md = did_markdown(rows, label="model", model_title="model", variant_column=True, verdicts=verdicts)
    assert "| C | original | Acc |" in md and "no evidence beyond the base model's gap" in md


def test_verdict_is_bonferroni_over_metrics():
    rows = [{"split": "D", "variant": "original", "metric": m, "p_value": p} for m, p in
            (("acc", 0.3), ("p_all", 0.02))]
    (v,) = did_verdicts(rows, 0.05)
    assert v["p_value"] == pytest.approx(0.04) and v["contaminated"] and v["driving_metric"] == "p_all"
    (v,) = did_verdicts(rows, 0.03)
    assert not v["contaminated"]


# ------------------------------------------------------------------ run_detect with base_model.path
@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_tok, tiny_model):
    """10 items, 2 reference draws and 1 paraphrase each; the audited model and a different base model."""
    from zcp.core.testing import tiny_llama

    root = tmp_path_factory.mktemp("did_world")
    tiny_model.save_pretrained(root / "model")
    tiny_tok.save_pretrained(root / "model")
    other = tiny_llama(tiny_tok, hidden=32, layers=2, heads=2, seed=1)
    other.save_pretrained(root / "base")
    tiny_tok.save_pretrained(root / "base")
    rng = random.Random(0)
    items, refs, paras = [], [], []
    for i in range(10):
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        items.append(Item(f"q{i}", f"Ann has {a} pens and gets {b} more. How many pens?", str(a + b)))
        paras.append(Item(f"q{i}::p0", f"Ann holds {a} pens and receives {b} more. How many pens?", str(a + b),
                          metadata={"original_id": f"q{i}"}))
        for j in range(2):
            c = rng.randint(10, 99)
            refs.append(Item(f"q{i}::r{j}", f"Ann has {c} pens and gets {b} more. How many pens?", str(c + b),
                             metadata={"original_id": f"q{i}"}))
    save_items(root / "data.jsonl", items)
    save_items(root / "ref.jsonl", refs)
    save_items(root / "para.jsonl", paras)
    return root


def _compose(root: Path, *extra: str):
    return compose("detect", f"model.path={root / 'model'}", f"data.path={root / 'data.jsonl'}",
                   f"data.reference_path={root / 'ref.jsonl'}", f"data.variant_paths.paraphrased={root / 'para.jsonl'}",
                   "data.name=toy", "logger=none", "probe.full_cot_max_tokens=12", "probe.zero_cot_max_tokens=6",
                   "run.chunk_size=8", "run.progress=false", "stats.bootstrap_samples=200", "seeds=[0,1]", *extra)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_run_detect_with_a_base_model_writes_base_run_did_md_and_summary_did(world, tmp_path, capsys):
    from zcp.probe.run import run_detect

    out = tmp_path / "run"
    summary = run_detect(_compose(world, f"output_dir={out}", f"base_model.path={world / 'base'}",
                                  "base_model.name=toy-base"))
    for name in ("records.jsonl", "summary.json", "table.md"):
        assert (out / "base" / name).exists(), name
    assert _lines(out / "base" / "records.jsonl") == _lines(out / "records.jsonl") == 10 + 20 + 10
    base_summary = json.loads((out / "base" / "summary.json").read_text())
    assert base_summary["model"] == "toy-base" and base_summary["base_model_of"] == "model"
    on_disk = json.loads((out / "summary.json").read_text())
    did = on_disk["did"]
    assert did == json.loads(json.dumps(summary["did"]))
    assert did["base_model"]["name"] == "toy-base" and did["alpha"] == 0.05
    rows = did["rows"]
    assert {(r["variant"], r["metric"]) for r in rows} == {(v, m) for v in ("original", "paraphrased") for m in METRICS}
    assert [(v["split"], v["variant"]) for v in did["verdicts"]] == [("toy", "original"), ("toy", "paraphrased")]
    # each gap is that run's own S - S_ref: the DiD is the difference of the two runs' gaps
    own = {(r["variant"], r["metric"]): r["s"] - r["s_ref"] for r in on_disk["results"]}
    base_own = {(r["variant"], r["metric"]): r["s"] - r["s_ref"] for r in base_summary["results"]}
    for r in rows:
        key = (r["variant"], r["metric"])
        assert r["n"] == 10
        assert r["gap_model"] == pytest.approx(own[key]) and r["gap_base"] == pytest.approx(base_own[key])
        assert r["did"] == pytest.approx(own[key] - base_own[key])
    assert any(r["did"] != 0.0 for r in rows)  # two different models: their gaps differ
    md = (out / "did.md").read_text()
    assert "| toy | paraphrased | P_all |" in md and "DiD verdict (Bonferroni over the metrics, alpha = 0.05" in md
    printed = capsys.readouterr().out
    assert printed.index("| Dataset | Variant | n |") < printed.index("DiD verdict")  # below the main table


def test_base_that_is_the_audited_model_gives_exactly_no_did_and_resumes(world, tmp_path):
    from zcp.probe.run import run_detect

    out = tmp_path / "run"
    cfg = _compose(world, f"output_dir={out}", f"base_model.path={world / 'model'}")
    first = run_detect(cfg)["did"]
    assert len(first["rows"]) == 2 * len(METRICS)
    assert all(r["did"] == 0.0 and r["gap_model"] == r["gap_base"] for r in first["rows"])
    assert all(r["p_value"] == 1.0 and r["c_cont"] == 0.5 for r in first["rows"])
    assert not any(v["contaminated"] for v in first["verdicts"])
    # a rerun resumes both runs: nothing probed again, the same DiD
    n_main, n_base = _lines(out / "records.jsonl"), _lines(out / "base" / "records.jsonl")
    again = run_detect(cfg)["did"]
    assert (_lines(out / "records.jsonl"), _lines(out / "base" / "records.jsonl")) == (n_main, n_base)
    assert again["rows"] == first["rows"]


@pytest.mark.parametrize("override, match", [
    ("base_model.path=/nonexistent/base", r"^base_model\.path=/nonexistent/base: no such folder"),
    ("base_model.adapter=/nonexistent/lora", r"^base_model\.path=None: must be set when base_model\.adapter"),
])
def test_bad_base_model_fails_in_one_line_before_anything_loads(world, tmp_path, monkeypatch, override, match):
    import zcp.backends.registry
    import zcp.config
    import zcp.probe.detect
    import zcp.probe.run
    from zcp.errors import ConfigError

    def never(*a: Any, **k: Any) -> None:
        raise AssertionError("loaded before the base model was checked")

    monkeypatch.setattr(zcp.backends.registry, "build_backend", never)
    monkeypatch.setattr(zcp.probe.run, "load_datasets", never)
    with pytest.raises(ConfigError, match=match) as e:
        zcp.probe.run.run_detect(_compose(world, f"output_dir={tmp_path / 'run'}", override))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_base_adapter_path_is_checked(world, tmp_path, monkeypatch):
    import zcp.config
    import zcp.probe.detect
    from zcp.errors import ConfigError

    monkeypatch.setattr(zcp.backends.registry, "build_backend", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(ConfigError, match=r"^base_model\.adapter=/nonexistent/lora: no such folder"):
        zcp.probe.run.run_detect(_compose(world, f"output_dir={tmp_path / 'run'}", f"base_model.path={world / 'base'}",
                                       "base_model.adapter=/nonexistent/lora"))


def test_unknown_base_model_key_fails_at_compose(world):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        _compose(world, "base_model.pth=/x")


def test_run_dir_unchanged_without_a_base_and_new_for_each_base(world):
    from omegaconf import OmegaConf, open_dict

    from zcp.config import run_dir
    from zcp.probe.did import base_model_config, base_weights

    cfg = _compose(world)
    before = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    with open_dict(before):
        del before["base_model"]  # the config as composed before base_model existed
    weights = {"model": "w", "adapter": None}
    plain = run_dir(before, "detect", "toy", "model", extra=weights)
    assert base_model_config(cfg.get("base_model"), cfg.model) is None and base_weights(None) == {}
    assert run_dir(without_null_base(cfg), "detect", "toy", "model", extra=weights) == plain
    dirs = set()
    for base in ("base", "model"):
        c = _compose(world, f"base_model.path={world / base}")
        bm = base_model_config(c.get("base_model"), c.model)
        assert bm.path == str(world / base) and bm.chat_template_kwargs == {}  # the audited model's settings
        dirs.add(run_dir(without_null_base(c), "detect", "toy", "model", extra={**weights, **base_weights(bm)}))
    assert len(dirs) == 2 and plain not in dirs
