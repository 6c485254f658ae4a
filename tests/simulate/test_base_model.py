"""The shipped tiny base model: files, offline loading, tokenizer, chat template, held-out accuracy."""

from __future__ import annotations

import json
import re

import pytest

from zcp.benchmarks.wordproblems import FINAL_ANSWER_PREFIX, signature, signatures
from zcp.simulate.base_model import (
    BENCHMARK_SEED,
    RESERVED_BENCHMARK_ITEMS,
    base_model_path,
    benchmark_pool,
    build_corpus,
    encode_conversation,
    load_base_model,
    pretrain_base_model,
    train_tokenizer,
)

PATH = base_model_path()


@pytest.fixture(scope="module")
def shipped():
    return load_base_model()


def test_shipped_files_exist_and_are_small() -> None:
    names = {p.name for p in PATH.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "RECIPE.md", "recipe.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth")) for n in names)  # safetensors only
    cfg = json.loads((PATH / "tokenizer_config.json").read_text())
    template = cfg.get("chat_template") or (PATH / "chat_template.jinja").read_text()
    assert "<|assistant|>" in template
    assert sum(p.stat().st_size for p in PATH.rglob("*") if p.is_file()) <= 10 * 2**20


def test_loads_offline_and_recipe_matches(shipped) -> None:
    model, tok = shipped
    recipe = json.loads((PATH / "recipe.json").read_text())
    n = sum(p.numel() for p in model.parameters())
    assert n == recipe["parameters"] and 500_000 <= n <= 3_000_000
    assert recipe["config"]["reserve_seed"] == BENCHMARK_SEED
    assert recipe["config"]["reserve_n"] == RESERVED_BENCHMARK_ITEMS
    # the project's target: full-CoT greedy accuracy >= 0.85 on the 300 reserved (held-out) items
    assert 0.85 <= recipe["heldout"]["cot_accuracy"] <= 1.0
    assert model.config.model_type == "llama" and len(tok) == model.config.vocab_size
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|bos|>", "<|eos|>", "<|pad|>")


def test_the_recipe_schema_is_the_jobs_and_reads_the_shipped_recipes() -> None:
    """PretrainConfig is the pretrain_base job's schema (each default defined once, in zcp.config.jobs); the shipped
    models' recipe.json read back into it; the defaults are the shipped checkpoint's recipe (only out_dir differs)
    and conf/pretrain_base.yaml states the same values; the constants the config layer cannot import agree."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from zcp.benchmarks.wordproblems import NumberRanges
    from zcp.simulate.base_model import PretrainConfig, pretrain_config, recipe_config
    from zcp.simulate.train_config import NumberLimits, PretrainBaseJob

    assert PretrainConfig is PretrainBaseJob
    defaults = recipe_config(PretrainConfig())
    shipped = json.loads((PATH / "recipe.json").read_text())["config"]
    assert recipe_config(pretrain_config(shipped)) == {**defaults, "out_dir": shipped["out_dir"]}
    direct = PATH.parent / "base_model_direct" / "recipe.json"
    if direct.is_file():
        rec = json.loads(direct.read_text())["config"]
        assert recipe_config(pretrain_config(rec)) == {**defaults, **rec}
    yaml = OmegaConf.to_container(OmegaConf.load(PATH.parents[2] / "conf" / "pretrain_base.yaml"))
    assert {k: v for k, v in yaml.items() if k in defaults} == {k: v for k, v in defaults.items() if k in yaml}
    assert (PretrainConfig().reserve_seed, PretrainConfig().reserve_n) == (BENCHMARK_SEED, RESERVED_BENCHMARK_ITEMS)
    assert asdict(NumberLimits()) == asdict(NumberRanges())


def test_tokenizer_splits_digits(shipped) -> None:
    _, tok = shipped
    text = "Tom has 1234 apples and 50 pears: 1234 + 50 = 1284."
    digit_toks = [t for t in tok.tokenize(text) if any(c.isdigit() for c in t)]
    assert all(sum(c.isdigit() for c in t) == 1 for t in digit_toks)
    assert [t.lstrip("Ġ") for t in digit_toks] == re.findall(r"\d", text)
    ids = tok("12 + 7 = 19.")["input_ids"]
    assert ids[0] == tok.bos_token_id  # plain text gets BOS from the post-processor
    assert tok.decode(ids, skip_special_tokens=True) == "12 + 7 = 19."


def test_chat_template_renders(shipped) -> None:
    _, tok = shipped
    q = "Tom has 3 apples. How many?"
    gen = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    assert gen == f"<|bos|><|user|>{q}\n<|assistant|>"
    full = tok.apply_chat_template([{"role": "user", "content": q}, {"role": "assistant", "content": "3."}],
                                   tokenize=False)
    assert full.startswith(gen) and full.rstrip("\n").endswith("3.<|eos|>")
    ids, labels = encode_conversation(tok, q, "3.")
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    n_answer = len(tok("3.", add_special_tokens=False)["input_ids"]) + 1  # + EOS
    assert labels[-1] == tok.eos_token_id and labels[-n_answer:] == ids[-n_answer:]
    assert labels[:-n_answer] == [-100] * (len(ids) - n_answer)
    # the zero-CoT prefix tokenises with the answer digits as their own tokens
    pre = tok(gen + FINAL_ANSWER_PREFIX + "42", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(pre[-2:]) == ["4", "2"]


def test_heldout_items_are_reserved_and_excluded_from_corpus() -> None:
    held = benchmark_pool(40)
    corpus = build_corpus(3000, seed=0, exclude=signatures(benchmark_pool(RESERVED_BENCHMARK_ITEMS)))
    assert not {signature(it) for it in corpus} & {signature(it) for it in held}
    assert all(it.solution and "\\boxed{" in it.solution for it in corpus)  # CoT only
    assert all(it.solution.split("\n")[0] != it.solution.split("\n")[-1] for it in corpus)
    with pytest.raises(ValueError):
        benchmark_pool(RESERVED_BENCHMARK_ITEMS + 1)


def test_full_cot_accuracy_on_heldout(shipped) -> None:
    from zcp.core.answers import answers_equal, extract_boxed

    model, tok = shipped
    items = benchmark_pool(100)
    try:
        from zcp.backends.base import GenerationRequest, Prompt
        from zcp.backends.hf import HFBackend

        backend = HFBackend(model, tok)
        outs = backend.generate([GenerationRequest(Prompt(user=it.question), max_new_tokens=80) for it in items])
    except ImportError:  # pragma: no cover - before the HF backend lands
        from zcp.simulate.base_model import generate_cot

        outs = generate_cot(model, tok, [it.question for it in items], max_new_tokens=80)
    correct = [answers_equal(extract_boxed(o), it.answer) for o, it in zip(outs, items, strict=True)]
    stated = json.loads((PATH / "recipe.json").read_text())["heldout"]["cot_accuracy"]
    # the stated figure is over 300 reserved items; 100 of them agree within ~3 binomial sd (sd ~0.025)
    assert sum(correct) / len(items) >= stated - 0.08, [o for o, c in zip(outs, correct, strict=True) if not c][:5]


def test_pretraining_pipeline_runs_end_to_end(tmp_path) -> None:
    recipe = pretrain_base_model(dict(
        out_dir=str(tmp_path / "m"), n_train=600, rewording_fraction=0.7, drill_fraction=0.2, vocab_size=400, hidden_size=32, num_layers=1, num_heads=2,
        intermediate_size=64, batch_size=16, max_steps=30, lr=1e-2, warmup_steps=5, compile=False, bf16=False,
        n_eval=4, eval_batch_size=4, max_new_tokens=8, reserve_n=60, bucket_widths=[64, 128, 192],
    ))
    assert recipe["steps_done"] == 30 and recipe["corpus_items"] == 600
    assert recipe["final_loss_mean_last50"] < recipe["first_loss"]  # it learns something
    model, tok = load_base_model(tmp_path / "m")
    assert sum(p.numel() for p in model.parameters()) == recipe["parameters"]
    assert tok.chat_template and (tmp_path / "m" / "RECIPE.md").exists()
    assert json.loads((tmp_path / "m" / "recipe.json").read_text())["heldout"]["n"] == 4
    # the direct-answer variant: continued from that model with answer-only examples in the mix
    cont = pretrain_base_model(dict(
        out_dir=str(tmp_path / "d"), init_from=str(tmp_path / "m"), answer_only_fraction=0.5, n_train=600,
        rewording_fraction=0.7, drill_fraction=0.2, batch_size=16, max_steps=5, lr=1e-3, warmup_steps=2,
        compile=False, bf16=False, n_eval=4, eval_batch_size=4, max_new_tokens=8, reserve_n=60,
        bucket_widths=[64, 128, 192],
    ))
    assert cont["init_from"]["path"] == str((tmp_path / "m").resolve()) and 250 <= cont["answer_only_items"] <= 350
    assert cont["answer_only_seen"]["n"] == 4 and cont["parameters"] == recipe["parameters"]
    _, d_tok = load_base_model(tmp_path / "d")
    assert d_tok.get_vocab() == tok.get_vocab()  # the parent's tokenizer, not a new one
    md = (tmp_path / "d" / "RECIPE.md").read_text()
    assert "Continued pretraining" in md and "answer-only" in md


def test_tokenizer_training_is_deterministic() -> None:
    texts = [it.question + "\n" + it.solution for it in benchmark_pool(60)]
    a, b = train_tokenizer(texts, 400), train_tokenizer(texts, 400)
    assert a.get_vocab() == b.get_vocab()


def test_answer_only_mix_share_and_benchmark_pool_excluded() -> None:
    """The direct-answer variant's corpus: answer-only items (final-answer line right after the question) at
    the configured share, none from the reserved benchmark pool, and fraction 0 leaves the corpus unchanged."""
    from zcp.simulate.base_model import answer_only, mix_answer_only

    pool = signatures(benchmark_pool(RESERVED_BENCHMARK_ITEMS))
    corpus = build_corpus(4000, seed=3, exclude=pool, rewording_fraction=0.3, drill_fraction=0.4)
    mixed = mix_answer_only(corpus, 0.25, seed=3, exclude=pool)
    ao = [it for it in mixed if it.metadata.get("answer_only")]
    assert abs(len(ao) / len(mixed) - 0.25) < 0.03
    assert {it.metadata["source"] for it in ao} == {"wordproblem", "drill"}
    for it in ao:
        assert it.solution == f"{FINAL_ANSWER_PREFIX}{it.answer}}} \\]"
    assert not {signature(it) for it in ao if it.metadata["source"] == "wordproblem"} & pool
    # the other items keep their chain of thought, in the same order
    assert [it.id for it in mixed] == [it.id for it in corpus]
    assert all(m.solution == c.solution for m, c in zip(mixed, corpus, strict=True) if not m.metadata.get("answer_only"))
    assert [it.solution for it in mix_answer_only(corpus, 0.0, seed=3)] == [it.solution for it in corpus]
    leaked = [answer_only(benchmark_pool(1)[0])]
    with pytest.raises(RuntimeError, match="reserved benchmark pool"):
        mix_answer_only(leaked, 1.0, seed=0, exclude=pool)
    with pytest.raises(ValueError, match="answer_only_fraction"):
        mix_answer_only(corpus, 1.5, seed=0)


def test_direct_answer_variant_keeps_cot_and_answers_without_it() -> None:
    """zcp/assets/base_model_direct: the shipped model's full-CoT quality, plus a measurable zero-CoT accuracy
    (the direct-answer pathway) on reserved items it never saw, re-measured live on 100 of them."""
    from zcp.simulate.base_model import zero_cot_accuracy

    direct = PATH.parent / "base_model_direct"
    if not (direct / "model.safetensors").is_file():
        pytest.skip("direct-answer variant not present")
    rec = json.loads((direct / "recipe.json").read_text())
    shipped_rec = json.loads((PATH / "recipe.json").read_text())
    assert rec["config"]["answer_only_fraction"] > 0 and rec["answer_only_items"] > 0
    assert rec["heldout"]["cot_accuracy"] >= shipped_rec["heldout"]["cot_accuracy"] - 0.02
    assert rec["heldout"]["zero_cot_accuracy"] >= shipped_rec["heldout"]["zero_cot_accuracy"] + 0.05
    model, tok = load_base_model(direct)
    items = benchmark_pool(100)
    live = zero_cot_accuracy(model, tok, items)["accuracy"]
    base = zero_cot_accuracy(*load_base_model(), items)["accuracy"]
    assert live >= base + 0.04, (live, base)
