"""probe=zcp_release: the paper's code release's prompts (Yifan-Lan/zero-cot-probe, statistical_significance_test.py).

The group composes and validates; its prompts render exactly as the release builds them (checked against a
re-statement of the release's format_chat_prompt / format_continued_prompt / compute_token_confidences on a
Qwen-style chat template); p_first / p_all score the gold answer and the brace that closes the release's box.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
from configs import compose
from fakes import FakeBackend

from zcp.backends.base import ScoreResult
from zcp.backends.hf import HFBackend
from zcp.config.schemas import validate
from zcp.core.items import Item
from zcp.probe.detect import probe_config
from zcp.probe.probe_config import ProbeGroupConfig
from zcp.probe.prompts import (
    answer_end,
    full_cot_prompt,
    probe_items,
    scored_continuation,
    zero_cot_prompt,
)

# The release's strings, as its Python source spells them (statistical_significance_test.py)
RELEASE_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
RELEASE_ANSWER_PREFIX = "\n\nThe final answer is:\n\\[\n\\boxed{"  # compute_token_confidences' answer_prefix
RELEASE_FORCE_PROMPT = "\n\nThe final answer is:\n\\[\n\\boxed"  # format_continued_prompt's force_answer_prompt
QWEN_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QUESTION = "Ann has 3 pens and gets 4 more. How many pens?"


def _release_probe() -> dict:
    return compose("detect", "probe=zcp_release", resolve=True)


def test_the_group_composes_validates_and_holds_the_release_strings():
    cfg = _release_probe()
    checked = validate(cfg)["probe"]
    assert isinstance(checked, ProbeGroupConfig)
    assert checked.zero_cot_prefix == RELEASE_ANSWER_PREFIX
    assert checked.zero_cot_prefix == "\n\nThe final answer is:\n" + "\\" + "[\n" + "\\" + "boxed{"  # the characters
    assert checked.system == RELEASE_SYSTEM and checked.full_cot_suffix == "" and checked.user_template == "{question}"
    assert checked.answer_suffix is None and answer_end(checked.zero_cot_prefix) == "}"
    assert (checked.zero_cot_max_tokens, checked.full_cot_max_tokens) == (32, 2048)  # the release's max_tokens
    assert list(checked.metrics) == ["acc", "con", "p_first", "p_all"]
    p = probe_config(cfg["probe"], cfg["model"])  # the shipped model's config sets no probe key over it
    assert (p.system, p.zero_cot_prefix, p.full_cot_suffix) == (RELEASE_SYSTEM, RELEASE_ANSWER_PREFIX, "")


def test_prompts_carry_the_instruction_in_both_modes_and_the_prefill_in_zero_cot_only():
    p = probe_config(_release_probe()["probe"])
    z, f = zero_cot_prompt(QUESTION, p), full_cot_prompt(QUESTION, p)
    assert (z.system, z.user, z.assistant_prefix) == (RELEASE_SYSTEM, QUESTION, RELEASE_ANSWER_PREFIX)
    assert (f.system, f.user, f.assistant_prefix) == (RELEASE_SYSTEM, QUESTION, "")


def test_rendered_prompts_equal_the_releases_on_a_qwen_style_template(tiny_model, tiny_tok):
    """The release (model type qwen) renders [system, user] with add_generation_prompt=True for full CoT and for
    the scored prompt (then appends answer_prefix), and [system, user, assistant=force prompt] with the end token
    stripped for zero-CoT generation; zcp's render of the group's prompts is the same text."""
    tok = copy.deepcopy(tiny_tok)
    tok.chat_template = QWEN_TEMPLATE
    backend = HFBackend(tiny_model, tok)
    p = probe_config(_release_probe()["probe"])
    msgs = [{"role": "system", "content": RELEASE_SYSTEM}, {"role": "user", "content": QUESTION}]
    chat = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    continued = tok.apply_chat_template([*msgs, {"role": "assistant", "content": RELEASE_FORCE_PROMPT}],
                                        tokenize=False, add_generation_prompt=False).rstrip()
    continued = continued[: -len("<|im_end|>")] if continued.endswith("<|im_end|>") else continued
    zero = backend.render(zero_cot_prompt(QUESTION, p))
    assert backend.render(full_cot_prompt(QUESTION, p)) == chat
    assert zero == chat + RELEASE_ANSWER_PREFIX  # compute_token_confidences' prompt + answer_prefix
    assert zero == continued + "{"  # the generation prompt, with the brace the model would write next
    assert zero.endswith("<|im_start|>assistant\n\n\nThe final answer is:\n\\[\n\\boxed{")


def test_p_first_and_p_all_score_the_answer_and_the_closing_brace():
    p = replace(probe_config(_release_probe()["probe"]), metrics=("acc", "p_first", "p_all"))
    seen = []

    class Capture(FakeBackend):
        def score(self, requests):
            seen.extend(requests)
            # 0.5 for each of the answer's characters, 0.25 for the brace that ends it (the fake's token = a character)
            return [ScoreResult(tuple(math.log(0.25 if ch == "}" else 0.5) for ch in r.continuation)) for r in requests]

    rec = probe_items(Capture({QUESTION: "42"}), [Item("a", QUESTION, "42")], p)[0]
    assert seen[0].continuation == scored_continuation("42", p) == "42}"
    assert seen[0].prompt.assistant_prefix == RELEASE_ANSWER_PREFIX and seen[0].prompt.system == RELEASE_SYSTEM
    assert rec["answer_suffix"] == "}" and rec["n_answer_tokens"] == 3
    assert rec["p_first"] == pytest.approx(0.5)
    assert rec["p_all"] == pytest.approx((0.5 * 0.5 * 0.25) ** (1 / 3))  # the brace is one of the scored tokens
    assert rec["prediction"] == "42" and rec["correct"]  # the generated answer read back out of the release's box


def test_on_a_real_tokenizer_the_scored_tokens_are_the_answer_and_brace_in_context(tiny_model, tiny_tok):
    backend = HFBackend(tiny_model, tiny_tok)
    p = replace(probe_config(_release_probe()["probe"]), metrics=("p_first", "p_all"))
    rec = probe_items(backend, [Item("a", QUESTION, "7")], p)[0]
    prompt = backend.render(zero_cot_prompt(QUESTION, p))
    ids = lambda text: tiny_tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert ids(prompt + "7}")[: len(ids(prompt))] == ids(prompt)  # the prefix's tokens are unchanged by the answer
    assert rec["n_answer_tokens"] == len(ids(prompt + "7}")) - len(ids(prompt)) >= 2
    assert 0.0 < rec["p_all"] <= 1.0 and 0.0 < rec["p_first"] <= 1.0
