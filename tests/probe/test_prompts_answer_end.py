"""p_first / p_all score the gold answer AND the text that ends it.

Scored on the answer's tokens alone, a strict prefix of the model's answer (gold "5" where the model
answers "50") got p_all ~1 on a digit-split tokenizer. With the closing brace scored too, "5}" is what
the model would have to emit, and it does not. Checked on a tokenizer that splits digits and on one that
merges them ("50" one token), with a tiny Llama fitted to answer "50}" after the zero-CoT pre-fill.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zcp.backends.base import Prompt
from zcp.backends.hf import HFBackend
from zcp.core.items import Item
from zcp.core.testing import CHAT_TEMPLATE, SPECIAL_TOKENS, fit_sequences, tiny_llama, train_tokenizer
from zcp.probe.prompts import (
    ZERO_COT_PREFIX,
    ProbeConfig,
    answer_end,
    answer_score_requests,
    positions_needed,
    probe_items,
    probe_truncated,
    scored_continuation,
    scored_suffix,
    zero_cot_prompt,
)

QUESTION = "Tom has 25 apples and buys 25 more. How many apples does he have?"
# (question, memorised answer): the probed one answers 50; the others keep the model from answering 50 to all.
MEMORISED = [(QUESTION, "50"), ("Ann has 3 pens and gets 4 more. How many pens?", "7"),
             ("A box holds 9 rows of 9 eggs. How many eggs?", "81")]
CORPUS = [f"{q} The final answer is: \\[ \\boxed{{{a}}} \\]" for q, a in MEMORISED] + [
    f"n = {n}. The final answer is: \\[ \\boxed{{{n}}} \\]" for n in (50, 5, 505, 50, 7, 81, 50, 55, 500, 5050)
] * 20


# ---------------------------------------------------------------------------------------- the rule


def test_answer_end_closes_every_group_the_prefix_leaves_open():
    assert answer_end(ZERO_COT_PREFIX) == "}"
    assert answer_end("The final answer is: \\[ \\boxed{\\text{") == "}}"
    assert answer_end("\\fbox{") == "}"
    assert answer_end("{a} then \\boxed{") == "}"  # closed groups do not count
    assert answer_end("} stray, then \\boxed{") == "}"  # a brace closing nothing is ignored


def test_answer_end_without_an_open_group_is_the_end_of_the_line():
    assert answer_end("#### ") == "\n"
    assert answer_end("The answer is {x}: ") == "\n"


def test_explicit_suffix_overrides_the_derived_one():
    assert scored_suffix(ProbeConfig()) == "}"
    assert scored_suffix(ProbeConfig(zero_cot_prefix="#### ")) == "\n"
    assert scored_suffix(ProbeConfig(answer_suffix="} \\]")) == "} \\]"
    assert scored_suffix(ProbeConfig(answer_suffix="")) == ""  # the bare answer, as before its end was scored
    assert scored_continuation("50", ProbeConfig()) == "50}"
    with pytest.raises(ValueError, match="answer_suffix"):
        ProbeConfig(answer_suffix=1)  # type: ignore[arg-type]


def test_config_group_documents_the_key_with_a_null_default():
    from configs import compose

    from zcp.probe.detect import probe_config

    conf = Path(__file__).resolve().parents[2] / "conf"
    assert "answer_suffix" in (conf / "probe" / "zcp.yaml").read_text()  # documented in the group file
    group = compose("detect", "logger=none").probe
    assert "answer_suffix" in group and group.answer_suffix is None
    assert scored_suffix(probe_config(group)) == "}"


def test_truncated_cot_prompt_cut_inside_a_group_still_scores_the_box_end():
    from fakes import FakeBackend

    cfg = ProbeConfig(metrics=("p_all",))
    (rec,) = probe_truncated(FakeBackend({}), [Item("a", "q", "50")], ["so x = \\frac{1"], cfg)
    assert rec["answer_suffix"] == "}" and rec["n_answer_tokens"] == 3  # the fake scores a token per character


# ---------------------------------------------------------------------------------------- on models


def _merging_tokenizer():
    """Byte-level BPE with GPT-2's regex and no Digits pre-tokenizer: runs of digits are one pre-token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _fitted_backend(tok) -> HFBackend:
    """A tiny Llama fitted to answer each MEMORISED question with `<answer>} \\]` after the zero-CoT pre-fill.

    The training ids are the ids the backend scores (prompt as generation sees it, continuation tokenised
    in context), so what is fitted is exactly what is probed."""
    be = HFBackend(tiny_llama(tok, hidden=64, layers=2, heads=4, seed=0), tok)
    cfg = ProbeConfig()
    reqs = answer_score_requests([zero_cot_prompt(q, cfg) for q, _ in MEMORISED],
                                 [f"{a}}} \\]" for _, a in MEMORISED], ProbeConfig(answer_suffix=""))
    encs = be.encode_for_scoring(reqs)
    seqs = [[*e.ids, tok.eos_token_id] for e in encs]
    fit_sequences(be.model, tok, seqs, [e.start for e in encs], steps=200, lr=3e-3, seed=0)
    return be


@pytest.fixture(scope="module", params=["digit_split", "digit_merging"])
def fitted(request):
    tok = train_tokenizer(CORPUS, vocab_size=420) if request.param == "digit_split" else _merging_tokenizer()
    return request.param, _fitted_backend(tok)


def _scored_text(be: HFBackend, answer: str, cfg: ProbeConfig) -> tuple[str, int]:
    """The text the probe's score request for `answer` scores after the prompt, and its token count."""
    prompt: Prompt = zero_cot_prompt(QUESTION, cfg)
    (enc,) = be.encode_for_scoring(answer_score_requests([prompt], [answer], cfg))
    prompt_text = be.tokenizer.decode(list(enc.prompt_ids))
    full = be.tokenizer.decode(enc.ids)
    assert full.startswith(prompt_text)
    return full[len(prompt_text):], len(enc.continuation_ids)


def test_tokenizers_split_or_merge_digits_as_intended(fitted):
    kind, be = fitted
    text, n = _scored_text(be, "50", ProbeConfig())
    assert text == "50}"
    assert n == (3 if kind == "digit_split" else 2)  # "5" "0" "}"  vs  "50" "}"


def test_a_strict_prefix_of_the_answer_does_not_score_as_the_answer(fitted):
    kind, be = fitted
    cfg = ProbeConfig(metrics=("acc", "p_first", "p_all"))
    items = [Item("full", QUESTION, "50"), Item("prefix", QUESTION, "5")]
    full, prefix = probe_items(be, items, cfg)
    assert full["prediction"] == "50" and full["correct"]  # the fit took: the model answers 50}
    for answer in ("50", "5"):
        assert _scored_text(be, answer, cfg)[0] == answer + "}"
    assert full["answer_suffix"] == prefix["answer_suffix"] == "}"
    assert full["n_answer_tokens"] == _scored_text(be, "50", cfg)[1]
    assert prefix["n_answer_tokens"] == _scored_text(be, "5", cfg)[1] == 2
    assert full["p_all"] > 0.9, kind
    assert prefix["p_all"] < 0.5, kind
    if kind == "digit_split":
        # the same first token ("5"), so p_first cannot tell them apart; only the scored end can, and
        # scoring the bare answer (the old rule) gives the prefix a near-perfect p_all
        assert prefix["p_first"] > 0.9
        (bare,) = probe_items(be, items[1:], ProbeConfig(metrics=("p_all",), answer_suffix=""))
        assert bare["p_all"] > 0.9 and bare["n_answer_tokens"] == 1
    else:
        assert prefix["p_first"] < 0.5  # "5" is not the token the model emits ("50" is)


def test_positions_needed_counts_the_scored_end(fitted):
    _, be = fitted
    item = [Item("full", QUESTION, "50")]
    with_end = positions_needed(be, item, ProbeConfig(metrics=("p_all",)))
    bare = positions_needed(be, item, ProbeConfig(metrics=("p_all",), answer_suffix=""))
    assert with_end is not None and bare is not None and with_end[0] == bare[0] + 1
    (prompt_ids,) = be.encode_prompts([zero_cot_prompt(QUESTION, ProbeConfig())])
    assert with_end[0] == len(prompt_ids) + _scored_text(be, "50", ProbeConfig())[1]
