"""TokenizedBackend's host-side shortcuts give exactly what the plain calls give: batched rendering, the prompt-ids
cache, and the joint tokenisation spliced at the prompt's last special token."""

import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from zcp.backends.base import Prompt, ScoreRequest
from zcp.backends.hf import HFBackend
from zcp.backends.tokenized import _remember
from zcp.config import asset_path
from zcp.core.testing import (
    SPECIAL_TOKENS,
    _wrap,
    tiny_llama,
    train_qwen2_style_tokenizer,
    train_sentencepiece_style_tokenizer,
    train_tokenizer,
)
from zcp.probe.prompts import ZERO_COT_PREFIX

TEXTS = [f"Ann has {i} pens and gets {i * 7 % 90} more. How many pens? é{i}ß The final answer is: \\[ \\boxed{{-{i}}} \\]"
         for i in range(150)]
CONTINUATIONS = ["42}", "-3}", "\\frac{1}{2}}", " 5}", "x}", "é}", "<|assistant|>1}", "}", "7 }", "\n3}"]


def _metaspace_first(texts: list[str]):
    """A SentencePiece-like tokenizer that prepends `▁` to the first piece of a text only (prepend_scheme
    "first"): the piece after a special token tokenises differently alone, so no splice may be used."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    alphabet = sorted(set("".join(texts)) | set("0123456789\n-+*/=(){}[],.\\$<|>") | {"\u2581"})
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=[*SPECIAL_TOKENS, "<unk>"],
                                                               initial_alphabet=alphabet, show_progress=False))
    from zcp.core.testing import CHAT_TEMPLATE

    return _wrap(tok, CHAT_TEMPLATE, unk_token="<unk>")


def _shipped():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(asset_path("base_model"))


TOKENIZERS = {
    "byte_level": lambda: train_tokenizer(TEXTS, vocab_size=400),
    "qwen2_style": lambda: train_qwen2_style_tokenizer(TEXTS, vocab_size=400),
    "sentencepiece_style": lambda: train_sentencepiece_style_tokenizer(TEXTS, vocab_size=300),
    "metaspace_first": lambda: _metaspace_first(TEXTS),
    "shipped": _shipped,
}


def _prompts(n: int = 40) -> list[Prompt]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        user = rng.choice(TEXTS)[: rng.randint(5, 90)] + rng.choice(["", " ", "\n", "{", "\\boxed{"])
        out.append(Prompt(user=user, assistant_prefix=rng.choice([ZERO_COT_PREFIX, "", "The answer is "]),
                          system=rng.choice([None, "Be brief."]), chat=i % 7 != 3))
    return out


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def backend_pair(request):
    """Two backends on one tokenizer: one whose caches are used, one always rendering and tokenising afresh."""
    tok = TOKENIZERS[request.param]()
    model = tiny_llama(tok, hidden=16, layers=1, heads=2)
    return request.param, HFBackend(model, tok), HFBackend(model, tok)


def _plain_joint(b: HFBackend, texts, conts, flags):
    return b._tokenize([t + c for t, c in zip(texts, conts, strict=True)], flags)


def test_spliced_joint_tokenisation_equals_the_whole_text(backend_pair):
    name, b, plain = backend_pair
    prompts = _prompts()
    rng = random.Random(1)
    conts = [rng.choice(CONTINUATIONS) for _ in prompts]
    flags = [b._special_tokens_for(p) for p in prompts]
    texts = b.render_all(prompts)
    ids = b.encode_prompts(prompts)
    before = b._spliced
    assert b._joint_ids(texts, conts, ids, flags) == _plain_joint(plain, texts, conts, flags)
    # the splice is used where the library cuts at an added token the same way alone and in context (every
    # templated prompt here), and not where a piece tokenises otherwise alone (Metaspace prepending to the first)
    templated = sum(not f for f in flags)
    assert b._spliced - before == (0 if name == "metaspace_first" else templated), name


def test_library_tokenisation_equals_the_wrapper(backend_pair):
    _, b, _ = backend_pair
    texts = b.render_all(_prompts()) + CONTINUATIONS + TEXTS[:20]
    for flag in (False, True):
        assert b._tokenize(texts, [flag] * len(texts)) == b.tokenizer(texts, add_special_tokens=flag)["input_ids"]


def test_encode_for_scoring_unchanged_by_the_caches(backend_pair, monkeypatch):
    """The cached, spliced, tail-checked encoding equals one request at a time with nothing kept and the decode
    check on the whole prompt (no restart tokens)."""
    _, b, plain = backend_pair
    prompts = _prompts()
    reqs = [ScoreRequest(p, c) for p, c in zip(prompts, CONTINUATIONS * 4, strict=False)]
    b.count_tokens(prompts, CONTINUATIONS)  # what a run's plan does first: fills the caches
    monkeypatch.setattr(plain, "_decode_restarts", lambda: frozenset())
    want = []
    for r in reqs:  # one request at a time, nothing kept between them
        plain._rendered.clear(), plain._prompt_ids.clear(), plain._piece_ids.clear()
        want += plain.encode_for_scoring([r])
    assert b.encode_for_scoring(reqs) == want
    assert b.encode_for_scoring(reqs) == want  # served from the caches the second time
    assert len({e.method for e in want}) > 1 or not b._decode_restarts()  # the check decides somewhere


def test_batched_rendering_equals_one_call_each(backend_pair):
    _, b, plain = backend_pair
    prompts = _prompts()
    b._rendered.clear()
    batched = b.render_all(prompts)
    one_by_one = []
    for p in prompts:
        plain._rendered.clear()
        one_by_one.append(plain.render(p))
    assert batched == one_by_one


def test_caches_follow_a_changed_chat_template_and_stay_bounded():
    tok = train_tokenizer(TEXTS, vocab_size=400)
    b = HFBackend(tiny_llama(tok, hidden=16, layers=1, heads=2), tok)
    p = Prompt(user="Ann has 3 pens.", assistant_prefix=ZERO_COT_PREFIX)
    with_template = b.encode_prompts([p])[0]
    saved = tok.chat_template
    try:
        tok.chat_template = None
        assert b.render(p) == "Ann has 3 pens.\n" + ZERO_COT_PREFIX
        assert b.encode_prompts([p])[0] == b._tokenize([b.render(p)], [True])[0] != with_template
    finally:
        tok.chat_template = saved
    cache: dict[int, int] = {}
    for k in range(10):
        _remember(cache, k, k, limit=4)
    assert list(cache) == [6, 7, 8, 9]


def test_a_tokenizer_json_with_padding_is_still_read_through_the_library():
    """The shipped tokenizer.json pads (left, to the longest); the wrapper drops that on each call without padding,
    so the backend primes it once and then tokenises through the library, with the wrapper's ids."""
    tok = train_tokenizer(TEXTS, vocab_size=400)
    tok.backend_tokenizer.enable_padding(direction="left", pad_id=0, pad_token="<pad>")
    tok.backend_tokenizer.enable_truncation(max_length=8)
    b = HFBackend(tiny_llama(tok, hidden=16, layers=1, heads=2), tok)
    assert b._rust_tokenizer() is tok.backend_tokenizer
    texts = TEXTS[:5] + CONTINUATIONS
    assert b._tokenize(texts, [False] * len(texts)) == tok(texts, add_special_tokens=False)["input_ids"]
    assert max(len(ids) for ids in b._tokenize(texts, [False] * len(texts))) > 8  # not truncated, not padded


def test_decoding_restarts_after_the_restart_tokens(backend_pair):
    """The decode check reads only a prompt's ids after its last restart token: that needs decode(a + b) ==
    decode(a) + decode(b) for every `a` ending with one. Random ids (partial UTF-8 sequences included) on each side;
    byte-level decoders have restart tokens (the template's special tokens), the others none."""
    name, b, _ = backend_pair
    restarts = sorted(b._decode_restarts())
    assert bool(restarts) == (name in {"byte_level", "qwen2_style", "shipped"}), (name, restarts)
    rng = random.Random(2)
    n = len(b.tokenizer)
    pairs = [([rng.randrange(n) for _ in range(rng.randrange(6))] + [rng.choice(restarts)],
              [rng.randrange(n) for _ in range(rng.randrange(8))]) for _ in range(2000 if restarts else 0)]
    whole = b._decode([x + y for x, y in pairs])
    left, right = b._decode([x for x, _ in pairs]), b._decode([y for _, y in pairs])
    assert whole == [u + v for u, v in zip(left, right, strict=True)]
    # not so at an arbitrary token: the property is the restart token's, not any cut's
    if restarts:
        cuts = [([rng.randrange(n) for _ in range(rng.randrange(1, 6))], [rng.randrange(n) for _ in range(6)])
                for _ in range(2000)]
        glued = b._decode([x + y for x, y in cuts])
        apart = [u + v for u, v in zip(b._decode([x for x, _ in cuts]), b._decode([y for _, y in cuts]), strict=True)]
        assert glued != apart


def test_decode_check_on_the_tail_decides_as_on_the_whole_prompt(backend_pair):
    """`_accept` on the ids after the prompt's last restart token accepts exactly the candidates the check on the
    whole prompt accepts: right tokenisations, random ids, ids cut inside a UTF-8 sequence, one token too many."""
    from zcp.backends.tokenized import _after_last

    _, b, _ = backend_pair
    rng = random.Random(3)
    prompts = _prompts()
    ids = b.encode_prompts(prompts)
    reqs, cands, pids = [], [], []
    for p, pi in zip(prompts, ids, strict=True):
        c = rng.choice(CONTINUATIONS)
        right = b._tokenize([c], [False])[0]
        for cand in (right, right[:-1], [*right, rng.randrange(len(b.tokenizer))],
                     [rng.randrange(len(b.tokenizer)) for _ in range(3)], b._tokenize(["é" + c], [False])[0][1:]):
            reqs.append(ScoreRequest(p, c))
            cands.append(cand)
            pids.append(pi)
    restarts = b._decode_restarts()
    cut = [_after_last(p, restarts) for p in pids]
    assert _after_last([7, 8, 9], frozenset({8})) == 2 and _after_last([7, 9], frozenset({8})) == 0
    fast: list = [None] * len(reqs)
    b._accept(fast, "m", cands, pids, cut, b._decode_distinct([p[k:] for p, k in zip(pids, cut, strict=True)]), reqs)
    whole: list = [None] * len(reqs)
    b._accept(whole, "m", cands, pids, [0] * len(reqs), b._decode(pids), reqs)
    assert fast == whole
    assert 0 < sum(e is not None for e in fast) < len(fast)  # both outcomes occur
    assert not restarts or any(k > 0 for k in cut)
