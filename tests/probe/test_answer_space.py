"""probe.answer_space=both: p_first/p_all score the gold answer with and without a leading space after the pre-fill
(zcp.probe.prompts.spaced_scores), on a digit-merging BPE built here and on SmolLM2's tokenizer when it is cached."""

import math
from pathlib import Path

import pytest

from zcp.backends.base import ScoreResult
from zcp.core.items import Item
from zcp.probe.prompts import ProbeConfig, _head, probe_items, spaced_scores, spaces_answer

SMOLLM2 = Path.home() / ".cache" / "zcp" / "models" / "smollm2-135m-instruct"


def _merging_tokenizer():
    """Byte-level BPE whose digits merge (`18` and ` 18` single tokens), unlike zcp.core.testing.train_tokenizer's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from zcp.core.testing import SPECIAL_TOKENS, _wrap

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [f"How many? The final answer is: \\[ \\boxed{{{a}}} \\] and \\boxed{{ {a}}}" for a in (18, 27, 18, 27)] * 20
    tok.train_from_iterator(texts, trainer=trainer)
    return _wrap(tok, "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                      "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def backend():
    from zcp.backends.hf import HFBackend
    from zcp.core.testing import tiny_llama

    tok = _merging_tokenizer()
    return HFBackend(tiny_llama(tok, hidden=32, layers=2, heads=2), tok)


ITEMS = [Item("a", "How many?", "18"), Item("b", "How many more?", "27")]


def test_both_spellings_are_scored_and_summed_on_a_digit_merging_bpe(backend):
    cfg = ProbeConfig(metrics=("p_first", "p_all"), answer_space="both")
    recs = probe_items(backend, ITEMS, cfg)
    exact = probe_items(backend, ITEMS, ProbeConfig(metrics=("p_first", "p_all")))
    for rec, ex, it in zip(recs, exact, ITEMS, strict=True):
        assert rec["scored"] == [f"{it.answer}}}", f" {it.answer}}}"] and rec["answer_space"] == "both"
        # the exact spelling's part is today's p_first; the sum adds the spaced spelling's first token
        assert rec["p_first_parts"][0] == pytest.approx(ex["p_first"])
        assert rec["p_first"] == pytest.approx(sum(rec["p_first_parts"]))
        assert rec["p_first"] > ex["p_first"]
        n = rec["n_answer_tokens"]
        assert rec["p_all"] == pytest.approx(sum(rec["p_all_parts"]) ** (1 / n))
        assert rec["p_all"] > ex["p_all"] and "scored" not in ex and "answer_space" not in ex
    # the tokenizer merges the digits: the spaced answer's first token carries them (` 18` as one token)
    from zcp.backends.base import ScoreRequest
    from zcp.probe.prompts import zero_cot_prompt

    (sc,) = backend.score([ScoreRequest(zero_cot_prompt("How many?", cfg), " 18}")])
    assert _head(sc) == 1 and sc.tokens[0].lstrip("\u0120") == "18"


def test_a_space_token_of_its_own_counts_up_to_the_first_digit():
    exact = ScoreResult((math.log(0.4), math.log(0.9)), ("1", "}"))
    spaced = ScoreResult((math.log(0.5), math.log(0.6), math.log(0.9)), ("\u0120", "1", "}"))  # SmolLM2's split
    out = spaced_scores(exact, spaced)
    assert out["p_first_parts"] == pytest.approx([0.4, 0.5 * 0.6])  # not P(" "): every spaced answer's mass
    assert out["p_first"] == pytest.approx(0.4 + 0.3)
    assert out["p_all"] == pytest.approx((0.4 * 0.9 + 0.5 * 0.6 * 0.9) ** 0.5)
    # no mass on the space: today's p_first and p_all
    none = spaced_scores(exact, ScoreResult((-1e4, 0.0, 0.0), ("\u0120", "1", "}")))
    assert none["p_first"] == pytest.approx(0.4) and none["p_all"] == pytest.approx(math.sqrt(0.4 * 0.9))


def test_no_second_space_after_a_prefill_ending_in_one():
    assert spaces_answer(ProbeConfig(answer_space="both"))
    assert not spaces_answer(ProbeConfig(answer_space="both", zero_cot_prefix="#### "))
    assert not spaces_answer(ProbeConfig())
    with pytest.raises(ValueError, match="answer_space"):
        ProbeConfig(answer_space="spaced")


@pytest.mark.skipif(not (SMOLLM2 / "tokenizer.json").exists(), reason="SmolLM2 not cached (make real-model)")
def test_smollm2_writes_the_space_as_a_token_of_its_own():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(SMOLLM2))
    ids = tok("\\boxed{ 18}", add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    at = pieces.index("{") + 1
    sc = ScoreResult(tuple(-1.0 for _ in pieces[at:]), tuple(pieces[at:]))
    assert _head(sc) == 2 and pieces[at + 1] == "1"  # " " then "1": p_first counts P(" ") x P("1" | " ")


def test_the_config_key_is_typed_and_checked_at_compose():
    from configs import compose

    from zcp.config import validate
    from zcp.errors import ConfigError

    cfg = compose("detect", "data.path=x", "data.reference_path=y", "probe.answer_space=both")
    assert validate(cfg)["probe"].answer_space == "both"
    with pytest.raises(ConfigError, match=r"probe\.answer_space"):
        validate(compose("detect", "data.path=x", "data.reference_path=y", "probe.answer_space=spaced"))
