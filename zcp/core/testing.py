"""Tiny models and tokenizers built locally, for tests, demos and benchmarks (nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]


# The pre-tokenizer regex of Qwen2 / Qwen2.5 (tokenizer.json): `{` merges with a following sign or
# backslash (`{-`, `{\`, `{(` are single pre-tokens), which is what makes in-context answer tokens differ
# from the tokens a model emits after a pre-filled `\boxed{`.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _wrap(tok: Any, chat_template: str | None, **special: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", **special)
    if chat_template:
        fast.chat_template = chat_template
    return fast


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512, chat_template: str | None = CHAT_TEMPLATE) -> Any:
    """Byte-level BPE trained on `texts` with digits split one by one; a fast HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return _wrap(tok, chat_template)


def train_qwen2_style_tokenizer(texts: Iterable[str], vocab_size: int = 512,
                                chat_template: str | None = CHAT_TEMPLATE) -> Any:
    """Byte-level BPE with Qwen2's pre-tokenizer (`QWEN2_PATTERN`, then byte-level without its own regex).

    Trained on text with `\\boxed{-3}`, `\\boxed{\\frac12}`, ... it learns `{-`, `{\\`, `{(` as single
    tokens, like the real Qwen2 vocabulary.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return _wrap(tok, chat_template)


def train_sentencepiece_style_tokenizer(texts: Iterable[str], vocab_size: int = 400,
                                        chat_template: str | None = CHAT_TEMPLATE) -> Any:
    """BPE over `▁`-joined words with a dummy prefix (Metaspace, prepend_scheme="always"), like Llama-2's.

    A text tokenised on its own starts with `▁`: "-3" alone decodes to " -3" after a prompt.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = list(texts)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    alphabet = sorted(set("".join(texts)) | set("0123456789\n-+*/=(){}[],.\\$") | {"\u2581"})
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[*SPECIAL_TOKENS, "<unk>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return _wrap(tok, chat_template, unk_token="<unk>")


def tiny_llama(tokenizer: Any, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
               max_positions: int = 512) -> Any:
    """A randomly initialised LlamaForCausalLM sized for CPU tests (~0.1M parameters at defaults)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def answer_only_completion(answer: str) -> str:
    """The zero-CoT-shaped completion used to plant a memorised answer."""
    from zcp.core.answers import final_answer_line

    return final_answer_line(answer)


def train_memorizer(model: Any, tokenizer: Any, pairs: list[tuple[str, str]], steps: int = 150, lr: float = 3e-3,
                    seed: int = 0) -> Any:
    """Full fine-tuning of a tiny model on (question, completion) chat pairs, loss on the completion only.

    Used by tests and the scoring benchmark to make a model that has memorised a set of answers.
    """
    seqs, starts = [], []
    for q, completion in pairs:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                               add_generation_prompt=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(completion + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        seqs.append(p_ids + c_ids)
        starts.append(len(p_ids))
    return fit_sequences(model, tokenizer, seqs, starts, steps=steps, lr=lr, seed=seed)


def fit_sequences(model: Any, tokenizer: Any, seqs: list[list[int]], starts: list[int] | None = None,
                  steps: int = 150, lr: float = 3e-3, seed: int = 0) -> Any:
    """Full-batch full fine-tuning of a tiny model on token sequences, the loss from `starts[i]` on (default:
    every token after the first): what makes test models memorise raw text or chat completions."""
    import torch

    torch.manual_seed(seed)
    starts = starts if starts is not None else [1] * len(seqs)
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), tokenizer.pad_token_id)
    labels = torch.full((len(seqs), n), -100)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, (s, st) in enumerate(zip(seqs, starts, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        labels[i, st : len(s)] = torch.tensor(s[st:])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()
