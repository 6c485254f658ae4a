"""HFBackend: scoring on generation's token ids, batch invariance, templates, generation."""

import logging
import math
import random
from pathlib import Path

import pytest
import torch

from zcp.backends.base import Backend, GenerationRequest, Prompt, ScoreRequest
from zcp.backends.hf import HFBackend
from zcp.core.testing import (
    tiny_llama,
    train_qwen2_style_tokenizer,
    train_sentencepiece_style_tokenizer,
    train_tokenizer,
)
from zcp.probe.prompts import ZERO_COT_PREFIX


@pytest.fixture(scope="module")
def backend(tiny_model, tiny_tok):
    return HFBackend(tiny_model, tiny_tok, max_batch_tokens=64, max_batch_size=3)


def test_implements_protocol(backend):
    assert isinstance(backend, Backend)


def test_chat_template_prefill_and_plain(backend, tiny_tok):
    p = Prompt(user="Ann has 3 pens.", assistant_prefix=ZERO_COT_PREFIX)
    text = backend.render(p)
    assert text.endswith("<|assistant|>\n" + ZERO_COT_PREFIX) and "Ann has 3 pens." in text
    assert backend.render(Prompt(user="abc", assistant_prefix="X", chat=False)) == "abcX"
    saved = tiny_tok.chat_template
    try:
        tiny_tok.chat_template = None
        assert backend.render(p) == "Ann has 3 pens.\n" + ZERO_COT_PREFIX
    finally:
        tiny_tok.chat_template = saved


def _manual_logprobs(model, tok, text: str, cont_start_char: int) -> list[float]:
    """Reference: one unpadded forward of the whole text, continuation tokens by offsets."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    first = next(k for k, (s, e) in enumerate(enc["offset_mapping"]) if e > cont_start_char)
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    return [lp[k - 1, ids[k]].item() for k in range(first, len(ids))]


def test_score_matches_unbatched_reference(backend, tiny_model, tiny_tok):
    reqs = [ScoreRequest(Prompt(user=f"Ann has {i} pens and gets {i * 3} more.", assistant_prefix=ZERO_COT_PREFIX),
                         str(100 + i * 37)) for i in range(7)]
    reqs.append(ScoreRequest(Prompt(user="A much longer question " * 4, assistant_prefix=ZERO_COT_PREFIX), "5"))
    got = backend.score(reqs)  # batches of at most 3 rows / 64 padded tokens, mixed lengths
    for r, res in zip(reqs, got, strict=True):
        prompt = backend.render(r.prompt)
        ref = _manual_logprobs(tiny_model, tiny_tok, prompt + r.continuation, len(prompt))
        assert res.n_tokens == len(ref) == len(r.continuation)  # digits are single tokens
        assert res.token_logprobs == pytest.approx(ref, abs=1e-4)
        assert "".join(res.tokens) == r.continuation


def _decodes_after(tok, prompt_ids, cont_ids) -> str:
    """The text `cont_ids` add after `prompt_ids`: what the model writes if it emits them."""
    full = tok.decode(list(prompt_ids) + list(cont_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    head = tok.decode(list(prompt_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert full.startswith(head)
    return full[len(head):]


def test_prompt_ending_in_a_space_is_scored_as_generation_sees_it(backend, tiny_tok):
    # Generation after "Ann has pens " conditions on the prompt's own trailing "Ġ" token; joint tokenisation
    # would merge that space into "Ġand", a token the model cannot emit after "Ġ".
    p = Prompt(user="Ann has pens ", chat=False)
    a = backend.encode_for_scoring([ScoreRequest(p, "and")])[0]
    assert a.ids[: a.start] == backend.encode_prompts([p])[0] and tiny_tok.convert_ids_to_tokens(a.ids[a.start - 1]) == "Ġ"
    assert a.method == "standalone" and _decodes_after(tiny_tok, a.prompt_ids, a.continuation_ids) == "and"
    assert "Ġand" not in tiny_tok.convert_ids_to_tokens(list(a.continuation_ids))
    b = backend.encode_for_scoring([ScoreRequest(Prompt(user="Ann has pens", chat=False), " and")])[0]
    assert b.method == "joint" and tiny_tok.convert_ids_to_tokens(list(b.continuation_ids)) == ["Ġand"]
    res = backend.score([ScoreRequest(p, "and"), ScoreRequest(Prompt(user="Ann has pens", chat=False), " and")])
    assert res[0].n_tokens == len(a.continuation_ids) and res[1].tokens == ("Ġand",)


# ------------------------------------------------------------------ tokenizers that merge across the boundary
BOUNDARY_ANSWERS = ["-3", "\\frac{1}{2}", "(1,2)", "42"]
# Qwen2's pre-tokenizer makes `{` + the answer's first character one pre-token; BPE merges them.
MERGED = {"-3": "{-", "\\frac{1}{2}": "{\\", "(1,2)": "{("}
TRAIN_ANSWERS = ["-3", "-12", "\\frac12", "\\frac{1}{2}", "(1,2)", "(3,4)", "42", "7", "-0.5", "\\sqrt{2}"]
TRAIN_TEXTS = [f"Ann has {i} pens. How many? The final answer is: \\[ \\boxed{{{a}}} \\]"
               for i in range(30) for a in TRAIN_ANSWERS]
QUESTION = Prompt(user="Ann has 3 pens. How many?", assistant_prefix=ZERO_COT_PREFIX)


@pytest.fixture(scope="module")
def qwen_backend():
    tok = train_qwen2_style_tokenizer(TRAIN_TEXTS, vocab_size=400)
    assert {"{-", "{\\", "{("} <= set(tok.get_vocab())  # real merged tokens, as in Qwen2's vocabulary
    return HFBackend(tiny_llama(tok, hidden=32, layers=2, heads=2), tok)


def _generation_prompt_ids(backend, prompt, monkeypatch) -> list[int]:
    """The ids `generate` feeds the model for `prompt` (captured from model.generate)."""
    seen = []
    real = backend.model.generate

    def spy(input_ids, attention_mask, **kw):
        seen.append(input_ids[attention_mask.bool()].tolist())
        return real(input_ids=input_ids, attention_mask=attention_mask, **kw)

    monkeypatch.setattr(backend.model, "generate", spy)
    backend.generate([GenerationRequest(prompt, max_new_tokens=1)])
    monkeypatch.undo()
    assert len(seen) == 1
    return seen[0]


def _old_joint_first_token(backend, prompt, answer) -> str:
    """What the former scoring did: joint tokenisation, first token covering the answer's first character."""
    text = backend.render(prompt)
    enc = backend.tokenizer(text + answer, add_special_tokens=False, return_offsets_mapping=True)
    first = next(k for k, (s, e) in enumerate(enc["offset_mapping"]) if e > len(text) and e > s)
    return backend.tokenizer.convert_ids_to_tokens(enc["input_ids"][first])


@pytest.mark.parametrize("answer", BOUNDARY_ANSWERS)
def test_scores_the_ids_generation_conditions_on(qwen_backend, monkeypatch, answer):
    be, tok = qwen_backend, qwen_backend.tokenizer
    gen_ids = _generation_prompt_ids(be, QUESTION, monkeypatch)
    enc = be.encode_for_scoring([ScoreRequest(QUESTION, answer)])[0]
    assert enc.ids[: enc.start] == gen_ids and tok.convert_ids_to_tokens(gen_ids[-1]) == "{"
    cont = enc.ids[enc.start : enc.end]
    assert _decodes_after(tok, gen_ids, cont) == answer  # emitted after the prompt, these ids write the answer
    # p_first's token and value: P(t1 | generation's prompt ids), as a plain forward of those ids gives it
    res = be.score([ScoreRequest(QUESTION, answer)])[0]
    with torch.no_grad():
        last = torch.log_softmax(be.model(input_ids=torch.tensor([gen_ids])).logits[0, -1].float(), -1)
    assert res.tokens == tuple(tok.convert_ids_to_tokens(cont))
    assert res.token_logprobs[0] == pytest.approx(last[cont[0]].item(), abs=1e-5)
    old = _old_joint_first_token(be, QUESTION, answer)
    if answer in MERGED:  # the former joint scoring scored `{-` etc., a token that also covers the prompt's `{`
        assert old == MERGED[answer] != res.tokens[0] and enc.method == "standalone"
    else:
        assert old == res.tokens[0] and enc.method == "joint"


def test_dummy_prefix_tokenizer_continuation_decodes_to_the_answer():
    tok = train_sentencepiece_style_tokenizer(TRAIN_TEXTS)
    be = HFBackend(tiny_llama(tok, hidden=32, layers=2, heads=2), tok)
    reqs = [ScoreRequest(QUESTION, a) for a in [*BOUNDARY_ANSWERS, " 42"]]
    reqs.append(ScoreRequest(Prompt(user="5 + 3 =", chat=False), " 8"))  # ArithMark's cloze form
    encs = be.encode_for_scoring(reqs)
    for r, e in zip(reqs, encs, strict=True):
        assert e.ids[: e.start] == be.encode_prompts([r.prompt])[0]
        assert _decodes_after(tok, e.prompt_ids, e.continuation_ids) == r.continuation, (r.continuation, e.method)
    minus = encs[0]
    # "-3" alone gets the dummy prefix ("▁-3" reads " -3" after the prompt): the anchored fallback drops it
    alone = tok("-3", add_special_tokens=False)["input_ids"]
    assert _decodes_after(tok, minus.prompt_ids, alone) == " -3" and minus.method == "anchored"
    assert encs[3].method == encs[4].method == encs[5].method == "joint"
    for res, e in zip(be.score(reqs), encs, strict=True):
        assert res.n_tokens == len(e.continuation_ids) and all(math.isfinite(x) for x in res.token_logprobs)


def test_unverifiable_continuation_is_scored_with_a_warning(caplog):
    from tokenizers import normalizers

    tok = train_tokenizer(TRAIN_TEXTS, vocab_size=300)
    tok.backend_tokenizer.normalizer = normalizers.Lowercase()  # "X" can never decode back to "X"
    be = HFBackend(tiny_llama(tok, hidden=32, layers=1, heads=2), tok)
    with caplog.at_level(logging.WARNING, logger="zcp.backends.hf"):
        enc = be.encode_for_scoring([ScoreRequest(QUESTION, "X")])[0]
    assert enc.method == "unverified" and "decodes back" in caplog.text
    assert be.score([ScoreRequest(QUESTION, "X")])[0].n_tokens == len(enc.continuation_ids) >= 1


# ------------------------------------------------------------------ batch invariance
def _varied_requests(n: int, seed: int = 0) -> list[ScoreRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        q = f"Ann has {rng.randint(1, 99)} pens" + " and gets more" * rng.randint(0, 12) + ". How many pens?"
        if i % 4 == 3:
            out.append(ScoreRequest(Prompt(user=q, chat=False), " " + str(rng.randint(1, 999))))
        else:
            out.append(ScoreRequest(Prompt(user=q, assistant_prefix=ZERO_COT_PREFIX), str(rng.randint(1, 99999))))
    return out


def _worst_batch_difference(backend, reqs, seed: int = 1) -> float:
    """Max |log-prob alone - log-prob in a batch| over batches of random companions, sizes, orders, duplicates."""
    alone = [backend.score([r])[0].token_logprobs for r in reqs]
    rng = random.Random(seed)
    worst = 0.0
    for size in [2, 3, 5, 8, 13, len(reqs), len(reqs)]:
        idx = rng.sample(range(len(reqs)), size)
        idx += idx[:2]
        backend.max_batch_size, backend.max_batch_tokens = rng.choice([2, 5, 64]), rng.choice([256, 16384])
        for i, res in zip(idx, backend.score([reqs[i] for i in idx]), strict=True):
            assert len(res.token_logprobs) == len(alone[i])
            worst = max(worst, *(abs(x - y) for x, y in zip(res.token_logprobs, alone[i], strict=True)))
    return worst


def _exact_or_tight(worst: float) -> bool:
    # Bit-exact with MKL (x86 CPU wheels; measured on 1, 2 and 4 threads): a row is padded to a length of its
    # own (`padded_length`) and batched only with rows of that length, and the LM head never gets the few
    # rows BLAS handles with special kernels. Other BLAS builds are held to 1e-6.
    return worst == 0.0 if torch.backends.mkl.is_available() else worst <= 1e-6


def test_a_request_scores_the_same_alone_or_in_any_batch(tiny_tok):
    # hidden 64 / 4 heads: the former scoring (padding to the batch's longest row) differed by 9.5e-7 here
    model = tiny_llama(tiny_tok, hidden=64, layers=2, heads=4)
    worst = _worst_batch_difference(HFBackend(model, tiny_tok), _varied_requests(24))
    assert _exact_or_tight(worst), worst


def test_shipped_model_scores_the_same_alone_or_in_any_batch():
    from zcp.config import asset_path

    path = asset_path("base_model")
    if not (Path(path) / "model.safetensors").exists():
        pytest.skip("shipped base model not found")
    backend = HFBackend.from_pretrained(path, device="cpu")
    # the former scoring differed by 9.5e-6 here (up to 1.6e-5 on other mixes)
    assert _exact_or_tight(_worst_batch_difference(backend, _varied_requests(16, seed=2)))


class _LooksAhead(torch.nn.Module):
    """A model whose positions see the padding after them when no mask hides it (attention that looks ahead):
    without a mask, a row's logits at token 0 move by a tenth per padding token. Records the mask of each call."""

    def __init__(self, inner, pad_id: int) -> None:
        super().__init__()
        self.inner, self.pad_id = inner, pad_id
        self.config, self.generation_config = inner.config, inner.generation_config
        self.masks: list = []

    def forward(self, input_ids, attention_mask=None, **kw):
        self.masks.append(attention_mask)
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, **kw)
        if attention_mask is None:
            out.logits[..., 0] += 0.1 * (input_ids == self.pad_id).sum(1)[:, None].float()
        return out


def test_scoring_always_passes_the_attention_mask(tiny_model, tiny_tok):
    reqs = _varied_requests(20, seed=3)
    plain = HFBackend(tiny_model, tiny_tok, max_batch_size=4)
    want = [r.token_logprobs for r in plain.score(reqs)]
    model = _LooksAhead(tiny_model, plain.pad_id)
    ahead = HFBackend(model, tiny_tok, max_batch_size=4)
    assert [r.token_logprobs for r in ahead.score(reqs)] == want  # padding hidden from a model that looks ahead
    assert model.masks and all(m is not None for m in model.masks)  # every forward got the mask
    assert any(bool((m == 0).any()) for m in model.masks)  # and some batch held padding for it to hide


def test_padded_length_depends_on_the_row_alone(backend):
    from zcp.backends.hf import padded_length

    for n in range(1, 700):
        p = padded_length(n)
        assert n <= p <= max(n + 7, n * 9 // 8 + 1) and p % 8 == 0
        assert padded_length(n, limit=256) == (max(n, min(p, 256)))
    reqs = _varied_requests(30)
    lengths = [e.end for e in backend.encode_for_scoring(reqs)]
    seen = []
    for width, batch in backend.score_batches(lengths):
        assert len(batch) <= backend.max_batch_size and width * len(batch) <= max(backend.max_batch_tokens, width)
        assert {padded_length(lengths[i], 512) for i in batch} == {width}
        seen += batch
    assert sorted(seen) == list(range(len(reqs)))


def test_score_errors(backend):
    with pytest.raises(ValueError, match="empty continuation"):
        backend.score([ScoreRequest(Prompt(user="q"), "")])
    assert backend.score([]) == []


def test_generate_greedy_is_batch_invariant_and_bounded(tiny_model, tiny_tok):
    reqs = [GenerationRequest(Prompt(user=f"Ann has {i} pens" + " and more" * i), max_new_tokens=6) for i in range(5)]
    single = [HFBackend(tiny_model, tiny_tok).generate([r])[0] for r in reqs]
    batched = HFBackend(tiny_model, tiny_tok, gen_batch_size=5).generate(reqs)
    assert single == batched
    for out in batched:
        assert len(tiny_tok(out, add_special_tokens=False)["input_ids"]) <= 6


def test_postprocess_box_and_stop_strings():
    from zcp.backends.hf import _postprocess

    assert _postprocess("12} \\] more", box=True, stop=()) == "12}"
    assert _postprocess("\\frac{1}{2}} tail", box=True, stop=()) == "\\frac{1}{2}}"
    assert _postprocess("12 no close", box=True, stop=()) == "12 no close"
    assert _postprocess("a b STOP c", box=False, stop=("STOP",)) == "a b "


def test_from_pretrained_roundtrip(tmp_path, tiny_model, tiny_tok):
    tiny_model.save_pretrained(tmp_path)
    tiny_tok.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    b = HFBackend.from_pretrained(tmp_path, device="cpu")
    r = ScoreRequest(Prompt(user="Ann has 3 pens", assistant_prefix=ZERO_COT_PREFIX), "42")
    ref = HFBackend(tiny_model, tiny_tok).score([r])[0]
    assert b.score([r])[0].token_logprobs == pytest.approx(ref.token_logprobs, abs=1e-5)
    assert math.isfinite(sum(ref.token_logprobs))


def test_model_rewritten_in_place_gets_a_new_fingerprint(tmp_path, tiny_model, tiny_tok):
    """Results are keyed by what the weights are, not where they live (a retrained model, same folder)."""
    from zcp.core.io import model_fingerprint

    tiny_model.save_pretrained(tmp_path / "m")
    tiny_tok.save_pretrained(tmp_path / "m")
    first = HFBackend.from_pretrained(tmp_path / "m", device="cpu").fingerprint
    assert first == HFBackend.from_pretrained(tmp_path / "m", device="cpu").fingerprint  # stable
    assert model_fingerprint(tmp_path / "m") is not None and model_fingerprint("org/hub-model") is None
    with torch.no_grad():
        tiny_model.model.norm.weight.add_(0.5)  # the final norm is saved last: a change in the file's tail
    tiny_model.save_pretrained(tmp_path / "m")
    assert HFBackend.from_pretrained(tmp_path / "m", device="cpu").fingerprint != first


@pytest.mark.parametrize("make", [train_tokenizer, train_qwen2_style_tokenizer, train_sentencepiece_style_tokenizer])
def test_direct_tokenizer_calls_equal_the_transformers_wrapper(make):
    """The scoring path calls the tokenizers library directly (speed); ids and texts must be the wrapper's."""
    texts = [f"Ann has {i} pens and {{-{i}}} more. \\boxed{{{i}}}" for i in range(40)]
    tok = make(texts, vocab_size=300)
    be = HFBackend(tiny_llama(tok, hidden=32, layers=1, heads=2), tok)
    assert be._rust_tokenizer() is not None
    for flag in (False, True):
        assert be._tokenize(texts, [flag] * len(texts)) == [list(x) for x in tok(texts, add_special_tokens=flag)["input_ids"]]
    ids = be._tokenize(texts, [True] * len(texts))
    assert be._decode(ids) == tok.batch_decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _counted_steps(backend: HFBackend) -> list[int]:
    """The model's forward calls made by `generate` (one per generated step of a batch), counted per call."""
    calls: list[int] = []
    forward = backend.model.forward

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    backend.model.forward = counted
    return calls


def test_stop_strings_end_rows_early_with_the_same_text(tiny_model, tiny_tok):
    prompts = [Prompt(user=f"Ann has {i} pens and gets {i * 7 % 90} more." + " How many?" * (i % 3)) for i in range(6)]
    free = HFBackend(tiny_model, tiny_tok, gen_batch_size=6).generate(
        [GenerationRequest(p, max_new_tokens=40) for p in prompts])
    # stop strings that occur early in some rows' free text and never in others'
    stops = (*sorted({t[3:6] for t in free if len(t) > 8})[:2], "never-generated")
    assert stops[:-1], free
    backend = HFBackend(tiny_model, tiny_tok, gen_batch_size=6)
    steps = _counted_steps(backend)
    stopped = backend.generate([GenerationRequest(p, max_new_tokens=40, stop=stops) for p in prompts])
    from zcp.backends.hf import _postprocess

    assert stopped == [_postprocess(t, box=False, stop=stops) for t in free]  # the text before the first stop
    assert sum(any(s in t for s in stops) for t in free) >= 1
    if all(any(s in t for s in stops) for t in free):  # every row stopped: the batch ended before the budget
        assert len(steps) < 40
    # one row per batch: a row that stops early costs fewer steps than the budget
    single = HFBackend(tiny_model, tiny_tok, gen_batch_size=1)
    steps1 = _counted_steps(single)
    out1 = single.generate([GenerationRequest(p, max_new_tokens=40, stop=stops) for p in prompts])
    assert out1 == stopped
    assert len(steps1) < 40 * len(prompts)


def test_stop_window_is_confirmed_on_the_whole_text(tiny_model, tiny_tok):
    """A stop string longer than any single token's text is still found (the window covers it), and a row whose
    text never holds it runs to the budget."""
    prompts = [Prompt(user=f"Ann has {i} pens") for i in range(3)]
    free = HFBackend(tiny_model, tiny_tok).generate([GenerationRequest(p, max_new_tokens=30) for p in prompts])
    long_stop = free[0][2:14]
    assert len(long_stop) == 12
    got = HFBackend(tiny_model, tiny_tok).generate(
        [GenerationRequest(p, max_new_tokens=30, stop=(long_stop,)) for p in prompts])
    from zcp.backends.hf import _postprocess

    assert got == [_postprocess(t, box=False, stop=(long_stop,)) for t in free]
    assert len(got[0]) <= 2 < len(free[0])  # cut before the stop, which starts at character 2 or earlier
