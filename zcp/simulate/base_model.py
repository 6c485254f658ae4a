"""The embedded tiny base model: tokenizer, chat template, pretraining from scratch, shipped checkpoint.

A ~1-3M parameter transformers Llama with a byte-level BPE tokenizer (digits split one per token)
is pretrained on the project's generated word problems in chat form (question -> step-by-step
solution ending in ``\\boxed{}``, loss on the assistant turn only). The checkpoint ships in
`zcp/assets/base_model/` so neither tests nor the demo pretrain. The pretraining corpus is
chain-of-thought only (no answer-only data, so the model has no zero-CoT "superpower") and excludes
a reserved benchmark pool: ``generate_word_problems(n <= RESERVED_BENCHMARK_ITEMS, seed=BENCHMARK_SEED)``
(see `benchmark_pool`) is guaranteed unseen.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from zcp import REPO_ROOT
from zcp.benchmarks.corpus import DRILL_TEMPLATES, arithmetic_drill, build_corpus, shipped_model_path  # noqa: F401 - re-exported
from zcp.benchmarks.reserved import BENCHMARK_SEED, RESERVED_BENCHMARK_ITEMS, benchmark_pool  # noqa: F401 - re-exported
from zcp.benchmarks.wordproblems import (
    FAMILIES,
    FINAL_ANSWER_PREFIX,
    FINAL_ANSWER_SUFFIX,
    NumberRanges,
    generate_word_problems,
    signature,
    signatures,
)
from zcp.config.conform import build
from zcp.core.items import Item
from zcp.simulate.train_config import PretrainBaseJob

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")

# The assistant turn ends with EOS, so a model trained on rendered conversations stops by itself;
# add_generation_prompt leaves the assistant turn open for generation or a pre-filled prefix.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>{{ message['content'] }}\n"
    "{% elif message['role'] == 'user' %}<|user|>{{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}<|assistant|>{% generation %}{{ message['content'] }}{{ eos_token }}{% endgeneration %}\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def base_model_path() -> Path:
    """Folder of the shipped base model (weights, config, tokenizer, RECIPE.md, recipe.json):
    zcp.benchmarks.corpus.shipped_model_path()."""
    return shipped_model_path()


def load_base_model(path: str | Path | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) of the shipped base model, loaded offline in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path or base_model_path())
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    model.eval()
    return model, tok


# ----------------------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: Sequence[str], vocab_size: int = 768) -> Any:
    """Byte-level BPE trained on `texts`, digits split one per token, wrapped as a PreTrainedTokenizerFast.

    BOS is prepended to plain text by the post-processor; the chat template writes BOS itself, so
    rendered conversations are tokenised with ``add_special_tokens=False``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # One digit per token, and the same digit tokens everywhere (the space before a number is its own
    # token), so copying a number from the question into a solution line is plain token copying.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [PAD, BOS, EOS, *ROLE_TOKENS]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                       special_tokens=[(BOS, bos_id)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   additional_special_tokens=list(ROLE_TOKENS), model_max_length=512)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def encode_conversation(tokenizer: Any, question: str, solution: str) -> tuple[list[int], list[int]]:
    """Token ids of a rendered (user question, assistant solution) chat and labels with the prompt masked (-100)."""
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                           add_generation_prompt=True)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tokenizer(solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return p_ids + a_ids, [-100] * len(p_ids) + a_ids


# ----------------------------------------------------------------------------------------- corpus


# `arithmetic_drill` and `build_corpus` (the corpus, a pure function of its recipe) live in zcp.benchmarks.corpus:
# the reference builders regenerate a model's corpus from its recipe.json without the training layer.


# ----------------------------------------------------------------------------------------- pretraining


def answer_only(item: Item) -> Item:
    """`item` with its assistant turn reduced to the final-answer line (no reasoning before it).

    This is the direct-answer pathway a large model has and the CoT-only corpus lacks: the answer
    line right after the question, the exact shape the zero-CoT probe pre-fills.
    """
    sol = f"{FINAL_ANSWER_PREFIX}{item.answer}{FINAL_ANSWER_SUFFIX}"
    return Item(id=item.id, question=item.question, answer=item.answer, solution=sol,
                metadata={**item.metadata, "answer_only": True})


def mix_answer_only(corpus: Sequence[Item], fraction: float, seed: int, exclude: set[str] | None = None) -> list[Item]:
    """`corpus` with a share `fraction` of its items (drawn with their own seeded stream) rendered answer-only.

    The draw uses a stream separate from `build_corpus`'s, so fraction 0 leaves the corpus (and the
    shipped CoT-only checkpoint's recipe) unchanged. Items whose signature is in `exclude` (the
    reserved benchmark pool) are never rendered answer-only; `build_corpus` already keeps them out.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"answer_only_fraction must be in [0, 1], got {fraction}")
    rng = random.Random(f"answer-only-{seed}")
    out: list[Item] = []
    for it in corpus:
        pick = rng.random() < fraction
        if pick and exclude and it.metadata.get("source") == "wordproblem" and signature(it) in exclude:
            raise RuntimeError(f"corpus item {it.id} is in the reserved benchmark pool")
        out.append(answer_only(it) if pick else it)
    return out


# Everything that determines the shipped checkpoint: the pretrain_base job's schema, where each default is defined
# (once); recipe.json records its fields but the logger (`recipe_config`). A mapping is read into it by
# `pretrain_config`, checked as the entry point checks conf/pretrain_base.yaml.
PretrainConfig = PretrainBaseJob


def pretrain_config(cfg: PretrainConfig | Mapping[str, Any]) -> PretrainConfig:
    """`cfg` as a PretrainConfig: one given is returned as is; a mapping (conf/pretrain_base.yaml's keys, a
    recipe.json's `config`) is built into one, every key typed and in range (one-line ConfigError naming it)."""
    if isinstance(cfg, PretrainBaseJob):
        return cfg
    return build(PretrainBaseJob, dict(cfg), "")


def recipe_config(cfg: PretrainConfig) -> dict[str, Any]:
    """The settings recipe.json records: every field of the recipe but the logger (which changes no weight)."""
    out = asdict(cfg)
    out.pop("logger")
    return out


def _model_config(cfg: PretrainConfig, tokenizer: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads, max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )


class _BucketBatcher:
    """Seeded endless stream of full (ids, mask, labels) batches, each padded to its length bucket's width."""

    def __init__(self, encoded: Sequence[tuple[list[int], list[int]]], widths: Sequence[int], batch_size: int,
                 pad_id: int, seed: int) -> None:
        longest = max(len(ids) for ids, _ in encoded)
        widths = sorted(widths)
        if longest > widths[-1]:  # one more bucket for the longest examples (a smaller vocabulary, say)
            widths.append(-(-longest // 8) * 8)
        self.encoded, self.widths, self.bs, self.pad = encoded, widths, batch_size, pad_id
        self.rng = random.Random(seed)
        self.buckets: dict[int, list[int]] = {}
        for i, (ids, _) in enumerate(encoded):
            w = next(w for w in self.widths if len(ids) <= w)
            self.buckets.setdefault(w, []).append(i)
        self.queue: list[tuple[int, list[int]]] = []

    def _refill(self) -> None:
        for w, idx in sorted(self.buckets.items()):
            idx = idx[:]
            self.rng.shuffle(idx)
            # full batches only (a partial one would be a new shape); the rest is reshuffled next epoch
            self.queue += [(w, idx[i:i + self.bs]) for i in range(0, len(idx) - self.bs + 1, self.bs)]
        self.rng.shuffle(self.queue)

    def next(self) -> tuple[Any, Any, Any]:
        import torch

        if not self.queue:
            self._refill()
        w, rows = self.queue.pop()
        ids = torch.full((len(rows), w), self.pad)
        labels = torch.full((len(rows), w), -100)
        mask = torch.zeros((len(rows), w), dtype=torch.long)
        for r, i in enumerate(rows):
            x, y = self.encoded[i]
            ids[r, :len(x)], labels[r, :len(y)], mask[r, :len(x)] = torch.tensor(x), torch.tensor(y), 1
        return ids, mask, labels


def _lr_at(step: int, cfg: PretrainConfig, total: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def generate_cot(model: Any, tokenizer: Any, questions: Sequence[str], max_new_tokens: int = 80,
                 batch_size: int = 100, assistant_prefix: str = "") -> list[str]:
    """Greedy completions of `questions` through the chat template (left-padded batches).

    Full CoT by default; ``assistant_prefix=FINAL_ANSWER_PREFIX`` gives the zero-CoT probe's pre-fill.
    """
    import torch

    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True) + assistant_prefix for q in questions]
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    outs: list[str] = []
    try:
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(prompts[i:i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            outs += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = old_side
    return outs


def cot_accuracy(model: Any, tokenizer: Any, items: Sequence[Item], max_new_tokens: int = 80,
                 batch_size: int = 100) -> dict[str, Any]:
    """Full-CoT greedy accuracy (boxed answer equals gold), overall and per family, plus the completions."""
    from zcp.core.answers import answers_equal, extract_boxed

    outs = generate_cot(model, tokenizer, [it.question for it in items], max_new_tokens, batch_size)
    correct = [answers_equal(extract_boxed(o), it.answer) for o, it in zip(outs, items, strict=True)]
    per: dict[str, list[bool]] = {}
    for it, c in zip(items, correct, strict=True):
        per.setdefault(it.metadata.get("family", "?"), []).append(c)
    return {
        "accuracy": sum(correct) / max(1, len(correct)),
        "per_family": {f: sum(v) / len(v) for f, v in sorted(per.items())},
        "n": len(items),
        "completions": outs,
        "correct": correct,
    }


def zero_cot_accuracy(model: Any, tokenizer: Any, items: Sequence[Item], batch_size: int = 100) -> dict[str, Any]:
    """Greedy zero-CoT accuracy (assistant turn pre-filled up to ``\\boxed{``), overall and per family."""
    from zcp.core.answers import answers_equal, extract_prefilled_box

    outs = generate_cot(model, tokenizer, [it.question for it in items], 8, batch_size, FINAL_ANSWER_PREFIX)
    correct = [answers_equal(extract_prefilled_box(o), it.answer) for o, it in zip(outs, items, strict=True)]
    per: dict[str, list[bool]] = {}
    for it, c in zip(items, correct, strict=True):
        per.setdefault(it.metadata.get("family", "?"), []).append(c)
    return {"accuracy": sum(correct) / max(1, len(correct)),
            "per_family": {f: sum(v) / len(v) for f, v in sorted(per.items())}}


def pretrain_base_model(cfg: PretrainConfig | Mapping[str, Any], tracker: Any = None) -> dict[str, Any]:
    """Train the tokenizer and the tiny Llama from scratch, evaluate on the reserved pool, save to `out_dir`.

    Returns the recipe record (also written as recipe.json and RECIPE.md beside the checkpoint).
    """
    import tokenizers
    import torch
    import transformers
    from tqdm.auto import tqdm
    from transformers import GenerationConfig, LlamaForCausalLM

    from zcp.core.io import seed_everything

    cfg = pretrain_config(cfg)
    t0 = time.time()
    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    limits = NumberRanges(**asdict(cfg.limits))
    reserved = generate_word_problems(cfg.reserve_n, seed=cfg.reserve_seed, id_prefix="bench", limits=limits)
    corpus = build_corpus(cfg.n_train, cfg.seed, signatures(reserved), cfg.rewording_fraction,
                          families=cfg.families, limits=limits, drill_fraction=cfg.drill_fraction)
    corpus = mix_answer_only(corpus, cfg.answer_only_fraction, cfg.seed, signatures(reserved))
    # every surface template (question and rewording) must be in the corpus
    covered = {(it.metadata["family"], "r" if "rewording" in it.metadata else "q",
                it.metadata.get("rewording", it.metadata["template"])) for it in corpus
               if it.metadata["source"] == "wordproblem"}
    fams = [FAMILIES[f] for f in (cfg.families or FAMILIES)]
    needed = {(f.name, "q", i) for f in fams for i in range(len(f.questions))}
    needed |= {(f.name, "r", i) for f in fams for i in range(len(f.rewordings))}
    if needed - covered:
        raise RuntimeError(f"corpus misses templates {sorted(needed - covered)}; raise n_train")

    parent = None
    if cfg.init_from:  # continued pretraining: the parent's tokenizer and weights, a new data mix
        from transformers import AutoTokenizer

        src = Path(cfg.init_from).resolve()
        tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
        model = LlamaForCausalLM.from_pretrained(src, local_files_only=True)
        parent = {"path": _rel(str(src)), "recipe": json.loads((src / "recipe.json").read_text())
                  if (src / "recipe.json").is_file() else None}
    else:
        tokenizer = train_tokenizer([f"{it.question}\n{it.solution}" for it in corpus], cfg.vocab_size)
        model = LlamaForCausalLM(_model_config(cfg, tokenizer))
    encoded = [encode_conversation(tokenizer, it.question, it.solution) for it in corpus]
    max_len = max(len(ids) for ids, _ in encoded)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))
    # Fixed batch shapes (a few length buckets, full batches only) let torch.compile build one graph
    # per bucket instead of recompiling for every padded width; on CPU this is ~3x faster than eager.
    forward = torch.compile(model, dynamic=False) if cfg.compile else model
    batches = _BucketBatcher(encoded, cfg.bucket_widths, cfg.batch_size, tokenizer.pad_token_id, cfg.seed)
    model.train()
    t_train = time.time()
    steps_done, losses = 0, []
    bar = tqdm(range(cfg.max_steps), desc="pretrain", mininterval=5)
    for step in bar:
        ids, mask, labels = batches.next()
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg, cfg.max_steps)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            loss = forward(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps_done = step + 1
        losses.append(loss.item())
        if step % 25 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if tracker is not None:
                tracker.log({"pretrain/loss": loss.item(), "pretrain/lr": opt.param_groups[0]["lr"]}, step=step)
        if (time.time() - t_train) / 60 > cfg.max_minutes:
            break
    train_s = time.time() - t_train

    model.eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=False, max_new_tokens=cfg.max_new_tokens,
    )
    held = [it for it in reserved if it.metadata["family"] in {f.name for f in fams}][:cfg.n_eval]
    res = cot_accuracy(model, tokenizer, held, cfg.max_new_tokens, cfg.eval_batch_size)
    zres = zero_cot_accuracy(model, tokenizer, held, cfg.eval_batch_size)
    # zero-CoT on answer-only training items (seen): the direct-answer pathway at work where it was taught
    seen_ao = [it for it in corpus if it.metadata.get("answer_only")][:cfg.n_eval]
    zseen = zero_cot_accuracy(model, tokenizer, seen_ao, cfg.eval_batch_size) if seen_ao else None
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out, save_jinja_files=False)  # chat template inside tokenizer_config.json
    recipe = {
        "config": {**recipe_config(cfg), "out_dir": _rel(str(cfg.out_dir))},  # no folder of this machine in it
        "parameters": n_params,
        "init_from": parent,
        "corpus_items": len(corpus),
        "answer_only_items": sum(1 for it in corpus if it.metadata.get("answer_only")),
        "max_tokens_per_example": max_len,
        "steps_done": steps_done,
        "examples_seen": steps_done * cfg.batch_size,
        "first_loss": losses[0],
        "final_loss_mean_last50": sum(losses[-50:]) / max(1, len(losses[-50:])),
        "train_seconds": round(train_s, 1),
        "total_seconds": round(time.time() - t0, 1),
        "hit_time_cap": steps_done < cfg.max_steps,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "heldout": {"pool": f"generate_word_problems({cfg.n_eval}, seed={cfg.reserve_seed}, id_prefix='bench')",
                    "n": res["n"], "cot_accuracy": res["accuracy"], "per_family": res["per_family"],
                    "zero_cot_accuracy": zres["accuracy"], "zero_cot_per_family": zres["per_family"]},
        "answer_only_seen": None if zseen is None else {
            "n": len(seen_ao), "zero_cot_accuracy": zseen["accuracy"], "per_family": zseen["per_family"]},
    }
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    (out / "RECIPE.md").write_text(_recipe_md(recipe))
    if tracker is not None:
        tracker.summary({"heldout/cot_accuracy": res["accuracy"], "parameters": n_params, "train_seconds": train_s})
    return recipe


def run_pretrain_base(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Entry point of train/run_pretrain_base.py: pretrain with W&B logging per `cfg.logger`, print the result."""
    from omegaconf import DictConfig, OmegaConf

    from zcp.core.tracking import Tracker

    c = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    logger = c.pop("logger", None) or {"enabled": False}
    c.pop("hydra", None)
    # checked by the entry point (PretrainBaseJob: a non-empty path, relative to where the command runs)
    c["out_dir"] = str(Path(pretrain_config(c).out_dir).resolve())
    with Tracker(logger, run_config=c, job_type="pretrain_base", name="pretrain_base") as tracker:
        recipe = pretrain_base_model(c, tracker=tracker)
    h = recipe["heldout"]
    print(f"saved {c['out_dir']}: {recipe['parameters']:,} parameters, {recipe['steps_done']} steps in "
          f"{recipe['train_seconds']:.0f} s; held-out full-CoT accuracy {h['cot_accuracy']:.3f} (n={h['n']}) "
          f"per family {h['per_family']}")
    return recipe


def _rel(path: str) -> str:
    """`path` relative to the repository root when inside it (recipe.json and the command line in RECIPE.md name
    no folder of the machine that trained the model); a relative path is returned as it is."""
    if not Path(path).is_absolute():
        return path
    root = REPO_ROOT
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def _recipe_md(r: Mapping[str, Any]) -> str:
    c, h = r["config"], r["heldout"]
    rows = "\n".join(f"| {f} | {a:.3f} | {h['zero_cot_per_family'].get(f, float('nan')):.3f} |"
                     for f, a in h["per_family"].items())
    limits = ", ".join(f"{k}={v}" for k, v in c["limits"].items())
    ao = c["answer_only_fraction"]
    if ao:
        data_ao = (f"- Direct-answer pathway: {r['answer_only_items']:,} items ({ao:.0%} of the corpus, word problems\n"
                   "  and drills alike, drawn by their own seeded stream) are answer-only: the assistant turn is the\n"
                   "  final-answer line alone, right after the question. None is from the reserved pool.")
    else:
        data_ao = "  Chain-of-thought only: no answer-only examples."
    seen = r.get("answer_only_seen")
    seen_fams = ", ".join(f"{'drills' if f == '?' else f} {a:.2f}" for f, a in (seen or {}).get("per_family", {}).items())
    seen_line = ("" if not seen else f"\nZero-CoT on the first {seen['n']} answer-only *training* items (seen in "
                 f"training): {seen['zero_cot_accuracy']:.3f} ({seen_fams}).\n")
    out_dir = c["out_dir"]
    out_arg = "" if out_dir.rstrip("/").endswith("assets/base_model") else f" out_dir={_rel(out_dir)}"
    ao_arg = f" answer_only_fraction={ao} max_steps={c['max_steps']}" if ao else ""
    parent = r.get("init_from")
    if parent:
        pr = (parent.get("recipe") or {}).get("heldout", {})
        ao_arg += (f" init_from={_rel(parent['path'])} lr={c['lr']} warmup_steps={c['warmup_steps']}"
                   f" compile={c['compile']} bf16={c['bf16']}")
        cont = (f"\n**Continued pretraining** of `{_rel(parent['path'])}` (its tokenizer and weights; held-out full-CoT "
                f"{pr.get('cot_accuracy', float('nan')):.3f}, zero-CoT {pr.get('zero_cot_accuracy', float('nan')):.3f} "
                f"before) on the data below.\n")
    else:
        cont = ""
    return f"""# zcp embedded base model

Tiny Llama ({r['parameters']:,} parameters; hidden {c['hidden_size']}, {c['num_layers']} layers,
{c['num_heads']} heads, MLP {c['intermediate_size']}, tied embeddings) with a byte-level BPE tokenizer
(vocab {c['vocab_size']}, digits split one per token) and a chat template, {'trained further' if parent else 'pretrained from scratch'} on CPU by

    python train/run_pretrain_base.py seed={c['seed']}{ao_arg}{out_arg}
{cont}
## Data (seed {c['seed']})
- {r['corpus_items']:,} chat-formatted items: word problems from `zcp.benchmarks.wordproblems` (all families,
  `NumberRanges({limits})`; question templates and, for {c['rewording_fraction']:.0%} of them, the
  rewording templates) and, for {c['drill_fraction']:.0%} of items, bare arithmetic drills
  (`What is 7 * 9?` with the same one-line working), whose operations are steps of random word problems.
- The assistant turn is the step-by-step solution ending in `The final answer is: \\[ \\boxed{{N}} \\]`;
  loss on the assistant turn only.
{data_ao}
- Excluded: the reserved benchmark pool `generate_word_problems({c['reserve_n']}, seed={c['reserve_seed']})`
  (by signature = family + values). `zcp.simulate.base_model.benchmark_pool(n)` returns a prefix of it.
  Arithmetic facts are not excluded (a drill may compute what a reserved item computes), so a
  benchmark item and its perturbed reference are on equal footing.

## Training
AdamW (lr {c['lr']}, betas 0.9/0.98, weight decay {c['weight_decay']}), warmup {c['warmup_steps']} steps then
cosine to {c['min_lr_ratio']} x lr, batch {c['batch_size']}, {r['steps_done']} steps
({r['examples_seen']:,} examples), bf16 autocast={c['bf16']}, torch.compile={c['compile']},
{c['threads']} CPU thread(s): {r['train_seconds']:.0f} s of training ({r['total_seconds']:.0f} s in all,
including data, tokenizer, compilation and evaluation). Final training loss {r['final_loss_mean_last50']:.4f}.

## Held-out greedy accuracy
{h['n']} items of the reserved pool (never seen in pretraining). Full CoT: **{h['cot_accuracy']:.3f}**;
zero-CoT (assistant turn pre-filled with `The final answer is: \\[ \\boxed{{`): {h['zero_cot_accuracy']:.3f}.
{seen_line}
| family | full CoT | zero-CoT |
| --- | --- | --- |
{rows}
"""
