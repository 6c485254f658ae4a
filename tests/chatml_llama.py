"""A real architecture in miniature, built here (nothing downloaded): a randomly initialised LlamaForCausalLM
(2 layers, hidden 64, 4 attention heads, 2 key/value heads: grouped-query attention as in SmolLM2) with a byte-level
BPE tokenizer trained on the project's generated word problems and SmolLM2-135M-Instruct's conventions: its
special tokens (<|endoftext|>, <|im_start|>, <|im_end|>), its ChatML chat template copied as a literal (it adds its
own system line when a conversation has none), and pad = eos = <|im_end|>, as in its tokenizer_config.json.

The toy models of the project (zcp.core.testing, the shipped base model) have templates and pad tokens of their
own; this one exercises what a real instruct model brings to the simulation.
"""

from __future__ import annotations

from pathlib import Path

# SmolLM2-135M-Instruct's chat_template.jinja, verbatim
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n"
    "'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}"
)
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def chatml_tokenizer(n_texts: int = 300, vocab_size: int = 700):
    """Byte-level BPE (no digit splitting, as SmolLM2's) trained on `n_texts` generated word problems with their
    solutions and the answer lines the simulation trains on; SmolLM2's special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from zcp.benchmarks.wordproblems import generate_word_problems
    from zcp.simulate.rewards import answer_line

    texts = []
    for it in generate_word_problems(n_texts, seed=5):
        texts.append(f"{it.question}\n{it.solution or ''}")
        texts += [answer_line(it.answer, fmt) for fmt in ("probe", "hash", "sentence", "boxed")]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", unk_token="<|endoftext|>")
    fast.chat_template = SMOLLM2_CHAT_TEMPLATE
    return fast


def chatml_llama(dest: Path, seed: int = 0) -> Path:
    """Save the tokenizer and a randomly initialised LlamaForCausalLM (safetensors) to `dest`; returns `dest`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = chatml_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    return dest
