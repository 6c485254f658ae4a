"""HFBackend: joint tokenisation, batching/padding invariance, templates, generation."""

import math

import pytest
import torch

from zcp.backends.base import Backend, GenerationRequest, Prompt, ScoreRequest
from zcp.backends.hf import HFBackend
from zcp.probe import ZERO_COT_PREFIX


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


def test_boundary_token_is_scored_in_context(backend):
    # "is" + " cat": byte-level BPE merges the space into the next word. Scoring "cat" after "x is "
    # must see the same single merged token as scoring " cat" after "x is", not "Ġ" + "cat".
    a = backend.score([ScoreRequest(Prompt(user="Ann has pens ", chat=False), "and")])[0]
    b = backend.score([ScoreRequest(Prompt(user="Ann has pens", chat=False), " and")])[0]
    assert a.n_tokens == b.n_tokens == 1
    assert a.token_logprobs == pytest.approx(b.token_logprobs)


def test_batched_scores_do_not_depend_on_batching(tiny_model, tiny_tok):
    reqs = [ScoreRequest(Prompt(user="x" * (i % 5 + 1) + " pens?", assistant_prefix=ZERO_COT_PREFIX), "4" * (i % 3 + 1))
            for i in range(10)]
    one = HFBackend(tiny_model, tiny_tok, max_batch_size=1).score(reqs)
    many = HFBackend(tiny_model, tiny_tok, max_batch_size=10).score(reqs)
    for x, y in zip(one, many, strict=True):
        assert x.token_logprobs == pytest.approx(y.token_logprobs, abs=1e-4)


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
    from zcp.io import model_fingerprint

    tiny_model.save_pretrained(tmp_path / "m")
    tiny_tok.save_pretrained(tmp_path / "m")
    first = HFBackend.from_pretrained(tmp_path / "m", device="cpu").fingerprint
    assert first == HFBackend.from_pretrained(tmp_path / "m", device="cpu").fingerprint  # stable
    assert model_fingerprint(tmp_path / "m") is not None and model_fingerprint("org/hub-model") is None
    with torch.no_grad():
        tiny_model.model.norm.weight.add_(0.5)  # the final norm is saved last: a change in the file's tail
    tiny_model.save_pretrained(tmp_path / "m")
    assert HFBackend.from_pretrained(tmp_path / "m", device="cpu").fingerprint != first
