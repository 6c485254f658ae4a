"""The shared base of every engine that runs a local tokenizer: prompt rendering and the tokenisation boundary.

`TokenizedBackend` owns what must be identical across engines for their scores to be comparable: how a
`Prompt` becomes text (`render`: the chat template with the model's `chat_template_kwargs`, e.g. Qwen3's
`enable_thinking=False`, then the pre-filled assistant prefix), which token ids generation conditions on
(`encode_prompts`), and which ids a continuation is scored on (`encode_for_scoring`). An engine
(transformers, vLLM, an OpenAI-compatible server fed token ids) only writes `score` and `generate` over
those ids, so p_first/p_all of two engines are log-probs of exactly the same tokens.

Tokenising prompt + continuation jointly would let a pre-tokenizer merge the prompt's last character with
the answer's first (Qwen2-style `{-`, `{\\`, `{(`): p_first would then score a token the model can never
emit after the pre-filled `\\boxed{`. `encode_for_scoring` documents the rule used instead.

Host work per request is kept off a run's critical path: a prompt is rendered once (the chat template applied
to all new prompts in one batched call) and tokenised once (a run counts its prompts' tokens before probing
and scores them after: the second time is a lookup), and the joint tokenisation of prompt + continuation
re-tokenises only the text after the prompt's last special token (`_joint_ids`), since the tokenizers library
tokenises the pieces between added tokens independently.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zcp.backends.base import Backend, Prompt, ScoreRequest

log = logging.getLogger(__name__)

# Texts put before a continuation whose standalone tokenisation does not decode back to it (a tokenizer
# that prepends a dummy space, SentencePiece `▁`): the anchor's own tokens are dropped afterwards.
_ANCHORS = ("\n", "\n\n", "0", "a", " ", "§")
# Entries a backend keeps of rendered prompts, prompt ids and tail tokenisations, oldest dropped first. A run's plan
# tokenises every prompt before scoring starts, so this is the largest run whose scoring reuses them (65,536 units:
# GSM8K with a dozen versions per item); ids are kept as 4-byte arrays, a few KB per long prompt in all.
CACHE_ENTRIES = 1 << 16


def _remember(cache: dict[Any, Any], key: Any, value: Any, limit: int = CACHE_ENTRIES) -> None:
    if len(cache) >= limit:
        del cache[next(iter(cache))]
    cache[key] = value


@dataclass(frozen=True)
class ScoringEncoding:
    """The token ids one score request is scored on.

    `prompt_ids` are exactly the ids `generate` feeds the model for the same prompt; `continuation_ids`
    are the continuation's tokens after them, scored by teacher forcing (the first one is p_first's
    token). `method` says how the continuation was tokenised: "joint" (the joint tokenisation of prompt +
    continuation starts with `prompt_ids`; its remainder), "standalone" (the continuation tokenised on its
    own), "anchored" (tokenised after an anchor text whose tokens were dropped) or "unverified" (no
    candidate decoded back to the continuation, e.g. a normalising tokenizer; the joint remainder, else
    the standalone tokens, are used and a warning is logged).
    """

    prompt_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    method: str = "joint"

    @property
    def ids(self) -> list[int]:
        """Prompt then continuation: the row that is fed to the model."""
        return [*self.prompt_ids, *self.continuation_ids]

    @property
    def start(self) -> int:
        """Index of the first continuation token in `ids`."""
        return len(self.prompt_ids)

    @property
    def end(self) -> int:
        """One past the last continuation token in `ids` (== len(ids))."""
        return len(self.prompt_ids) + len(self.continuation_ids)


class TokenizedBackend(Backend):
    """Rendering and tokenisation shared by the engines; subclasses implement `score` and `generate`.

    `tokenizer`: a fast (tokenizers-backed) transformers tokenizer. `chat_template_kwargs` are passed to
    every `apply_chat_template` call (Qwen3: `{"enable_thinking": False}`), so detection, evaluation and
    training render the same prompt. `chat=False` never uses the chat template (a base model whose
    tokenizer ships one it was not trained on). `plain_template` renders chat prompts when there is no
    template: by default the question, a newline, then the assistant prefix. `max_length` caps
    `context_length` below the model's positions (the model config's `max_length`).
    """

    def _init_tokenizer(self, tokenizer: Any, *, chat_template_kwargs: Mapping[str, Any] | None = None,
                        chat: bool = True, plain_template: str = "{user}\n{prefix}",
                        max_length: int | None = None) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"{type(self).__name__} needs a fast (tokenizers-backed) tokenizer")
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.chat = bool(chat)
        self.plain_template = plain_template
        self.max_length = int(max_length) if max_length else None
        self._token_text: dict[int, str] = {}
        self._token_str: dict[int, str] = {}
        self._rendered: dict[Prompt, str] = {}  # render's results (a function of the prompt and the settings above)
        self._prompt_ids: dict[tuple[str, bool], array[int]] = {}  # (rendered text, special tokens) -> ids
        self._piece_ids: dict[str, array[int]] = {}  # texts after a prompt's last special token -> ids
        self._splitters: dict[int, str] | None = None  # added tokens the tokenizer splits texts at (_joint_ids)
        self._restarts: frozenset[int] | None = None  # added tokens decoding restarts after (_decode_restarts)
        self._spliced = 0  # joint tokenisations spliced at a special token so far (_joint_ids)

    # ------------------------------------------------------------------ prompts
    def _uses_template(self, prompt: Prompt) -> bool:
        return bool(prompt.chat and self.chat and getattr(self.tokenizer, "chat_template", None))

    @staticmethod
    def _chat_messages(prompt: Prompt) -> list[dict[str, str]]:
        return ([{"role": "system", "content": prompt.system}] if prompt.system else []) + [
            {"role": "user", "content": prompt.user}
        ]

    def _fresh_caches(self) -> None:
        """Drop what was kept of rendered prompts and their ids when what they depend on changed (the tokenizer,
        its chat template, the rendering options: a caller may set them after construction)."""
        state = (id(self.tokenizer), getattr(self.tokenizer, "chat_template", None), self.chat, self.plain_template,
                 repr(self.chat_template_kwargs))
        if state != getattr(self, "_cache_state", None):
            self._cache_state = state
            self._rendered.clear()
            self._prompt_ids.clear()
            self._piece_ids.clear()
            self._token_str.clear()
            self._splitters = None
            self._restarts = None

    def render(self, prompt: Prompt) -> str:
        """The exact text the model conditions on (chat template + pre-filled assistant prefix)."""
        self._fresh_caches()
        text = self._rendered.get(prompt)
        if text is not None:
            return text
        if not prompt.chat:
            text = prompt.user + prompt.assistant_prefix
        elif self._uses_template(prompt):
            text = self.tokenizer.apply_chat_template(self._chat_messages(prompt), tokenize=False,
                                                      add_generation_prompt=True, **self.chat_template_kwargs)
            text += prompt.assistant_prefix
        else:
            user = f"{prompt.system}\n\n{prompt.user}" if prompt.system else prompt.user
            text = self.plain_template.format(user=user, prefix=prompt.assistant_prefix)
        _remember(self._rendered, prompt, text)
        return text

    def render_all(self, prompts: Sequence[Prompt]) -> list[str]:
        """`render` of each prompt; the chat template applied to the prompts not rendered yet in one batched
        call (the same text per prompt as one call each, without the per-call overhead). An engine that renders
        its own way (overrides `render`) renders them one by one."""
        if type(self).render is TokenizedBackend.render:
            self._fresh_caches()
            todo = list(dict.fromkeys(p for p in prompts if p not in self._rendered and self._uses_template(p)))
            if len(todo) > 1:
                texts = self.tokenizer.apply_chat_template([self._chat_messages(p) for p in todo], tokenize=False,
                                                           add_generation_prompt=True, **self.chat_template_kwargs)
                for p, text in zip(todo, texts, strict=True):
                    _remember(self._rendered, p, text + p.assistant_prefix)
        return [self.render(p) for p in prompts]

    def rendering(self) -> dict[str, Any]:
        """How `render` turns a chat prompt into text, for run records (summary.json, run_meta.json).

        `kind` is "chat_template" (the tokenizer's chat template, identified by `template_sha256`, rendered
        with `chat_template_kwargs`) or "plain_template" (`template`, with `reason`: the tokenizer has no
        chat template, or model.chat=false). Raw prompts (`Prompt.chat=False`) are always user + prefix.
        """
        import hashlib

        template = getattr(self.tokenizer, "chat_template", None)
        if self.chat and template:
            text = template if isinstance(template, str) else repr(template)
            return {"kind": "chat_template", "template_sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
                    "chat_template_kwargs": dict(self.chat_template_kwargs)}
        reason = "model.chat=false" if not self.chat else "the tokenizer has no chat template"
        return {"kind": "plain_template", "template": self.plain_template, "reason": reason}

    def _special_tokens_for(self, prompt: Prompt) -> bool:
        # A rendered chat template already carries BOS etc. as text; raw/plain prompts get the
        # tokenizer's own special tokens (e.g. BOS for Llama-style base models).
        return not self._uses_template(prompt)

    # ------------------------------------------------------------------ tokenisation
    def model_positions(self) -> int | None:
        """Positions the engine's model has (max_position_embeddings); None when unknown. Engines override."""
        return None

    @property
    def counts_tokens(self) -> bool:
        """True with a local tokenizer (an API engine without one cannot count)."""
        return self.tokenizer is not None

    @property
    def context_length(self) -> int | None:  # type: ignore[override]
        """Positions a probe may use: `max_length` when set (never above the model's), else the model's."""
        n = self.model_positions()
        if self.max_length:
            return min(self.max_length, n) if n else self.max_length
        return n

    def count_tokens(self, prompts: Sequence[Prompt], texts: Sequence[str] = ()) -> tuple[list[int], list[int]]:
        """Token counts of rendered prompts (as generation sees them) and of bare texts (e.g. answers)."""
        plen = [len(ids) for ids in self.encode_prompts(prompts)] if prompts else []
        distinct = list(dict.fromkeys(texts))  # a benchmark's answers repeat: each distinct text tokenised once
        n = {t: len(ids) for t, ids in zip(distinct, self._tokenize(distinct, [False] * len(distinct)), strict=True)}
        return plen, [n[t] for t in texts]

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """Token ids of each rendered prompt, tokenised alone: what `generate` and `score` condition on.

        Kept per rendered text (`CACHE_ENTRIES`): a run counts its prompts' tokens when it plans and encodes
        them again to score or generate; the second time is a lookup."""
        return self._prompt_tokens(self.render_all(prompts), [self._special_tokens_for(p) for p in prompts])

    def _prompt_tokens(self, texts: Sequence[str], flags: Sequence[bool]) -> list[list[int]]:
        """`_tokenize` through the prompt-ids cache."""
        self._fresh_caches()
        keys = [(t, bool(f)) for t, f in zip(texts, flags, strict=True)]
        got = {k: self._prompt_ids[k] for k in keys if k in self._prompt_ids}  # before new entries push any out
        todo = [k for k in dict.fromkeys(keys) if k not in got]
        for k, ids in zip(todo, self._tokenize([t for t, _ in todo], [f for _, f in todo]), strict=True):
            got[k] = array("I", ids)
            _remember(self._prompt_ids, k, got[k])
        return [list(got[k]) for k in keys]

    def _rust_tokenizer(self) -> Any:
        """The tokenizers-library object behind the fast tokenizer, when calling it directly gives exactly what
        the transformers wrapper gives (no truncation or padding configured on it, special tokens matched as
        the wrapper matches them); else None. The wrapper's per-call conversions cost about as much as the
        tokenisation itself, which a detection run does several times per item.

        A tokenizer.json may carry padding or truncation settings (the shipped model's pads); the wrapper drops
        them from the library on every call made without padding or truncation, as all of zcp's are, so one such
        call on an empty text (once per tokenizer) leaves the library as every wrapper call would leave it."""
        bt = getattr(self.tokenizer, "backend_tokenizer", None)
        if bt is not None and (bt.truncation is not None or bt.padding is not None) and \
                getattr(self, "_primed", None) is not self.tokenizer:
            self._primed = self.tokenizer
            self.tokenizer("", add_special_tokens=False)
        if bt is None or bt.truncation is not None or bt.padding is not None:
            return None
        if bool(getattr(bt, "encode_special_tokens", False)) != bool(getattr(self.tokenizer, "split_special_tokens", False)):
            return None
        return bt

    def _tokenize(self, texts: Sequence[str], add_special: Sequence[bool]) -> list[list[int]]:
        """Token ids of each text (`add_special`: per text, whether the tokenizer adds its special tokens, e.g. BOS):
        one batched call per flag, to the tokenizers library (`encode_batch_fast` where it has it: the same ids
        without the character offsets nothing here reads, a third less work) or else to the wrapper."""
        out: list[list[int]] = [[] for _ in texts]
        bt = self._rust_tokenizer()
        encode = None if bt is None else getattr(bt, "encode_batch_fast", None) or bt.encode_batch
        for flag in sorted(set(add_special)):
            idxs = [i for i, f in enumerate(add_special) if f == flag]
            batch = [texts[i] for i in idxs]
            if encode is not None:
                for i, e in zip(idxs, encode(batch, add_special_tokens=flag), strict=True):
                    out[i] = e.ids
            else:
                for i, ids in zip(idxs, self.tokenizer(batch, add_special_tokens=flag)["input_ids"], strict=True):
                    out[i] = list(ids)
        return out

    def _decode(self, seqs: Sequence[Sequence[int]]) -> list[str]:
        # Verbatim: special tokens kept, no clean-up of spaces before punctuation.
        bt = self._rust_tokenizer()
        if bt is not None:
            return bt.decode_batch([list(s) for s in seqs], skip_special_tokens=False)
        return self.tokenizer.batch_decode([list(s) for s in seqs], skip_special_tokens=False,
                                           clean_up_tokenization_spaces=False)

    def _decode_distinct(self, seqs: Sequence[Sequence[int]]) -> list[str]:
        """`_decode` of each sequence, each distinct one decoded once (a run's prompts share their tails after the
        last restart token, and its answers repeat)."""
        keys = [tuple(s) for s in seqs]
        distinct = list(dict.fromkeys(keys))
        text = dict(zip(distinct, self._decode(distinct), strict=True))
        return [text[k] for k in keys]

    def _decode_restarts(self) -> frozenset[int]:
        """Added tokens after which decoding starts afresh: for ids `a` ending with one and any ids `b`,
        decode(a + b) == decode(a) + decode(b), so `encode_for_scoring`'s decode check needs only the prompt's ids
        after the last of them (a chat template's assistant-turn token: a few ids instead of the whole prompt).

        It holds for the byte-level decoder (GPT-2, Llama 3, Qwen: every token's bytes concatenated, then read as
        UTF-8 with replacement) after a token whose text is ASCII, since an ASCII byte ends every UTF-8 sequence
        before it and continues none: what follows decodes the same alone. Only tokens that also split encoding
        (`_split_tokens`), and none for any other decoder (SentencePiece's Metaspace drops the space of a text's
        first token, WordPiece joins tokens with spaces: neither decodes a tail as it does in context)."""
        self._fresh_caches()
        if self._restarts is None:
            bt = self._rust_tokenizer()
            byte_level = bt is not None and type(bt.decoder).__name__ == "ByteLevel"
            self._restarts = frozenset(t for t, c in self._split_tokens().items() if byte_level and c.isascii())
        return self._restarts

    def _text_of(self, tid: int) -> str:
        t = self._token_text.get(tid)
        if t is None:
            t = self._token_text[tid] = self.tokenizer.decode([tid])
        return t

    def encode_for_scoring(self, requests: Sequence[ScoreRequest]) -> list[ScoringEncoding]:
        """The ids each request is scored on: the prompt's generation ids, then the continuation's tokens.

        The prompt is `encode_prompts` (rendered, tokenised alone, with generation's special-token rule).
        The continuation's tokens are the first candidate that decodes back to exactly the continuation
        after the prompt (`decode(prompt + cont) == decode(prompt) + continuation`, i.e. the text the model
        would have produced had it emitted those tokens):

        1. "joint": if the joint tokenisation of prompt + continuation starts with exactly the prompt's
           ids, its remainder (the common case: the continuation is tokenised as in running text, so
           " 42" after "EXPR =" keeps a byte-level tokenizer's merged space);
        2. "standalone": otherwise (a merge across the boundary, e.g. `{` + `-3` -> `{-`, `3`, or "is" +
           "land" -> "island"), the continuation tokenised on its own, without special tokens;
        3. "anchored": when that does not decode back (a tokenizer that prepends a dummy space, `▁-3`),
           the continuation tokenised after an anchor text (a newline, ...) whose own ids are dropped.

        If none verifies (a normalising tokenizer: NFKC, lower-casing) the joint remainder, else the
        standalone ids, are used and a warning is logged. Every engine scores these same ids.
        """
        for i, r in enumerate(requests):
            if not r.continuation:
                raise ValueError(f"score request {i}: empty continuation")
        flags = [self._special_tokens_for(r.prompt) for r in requests]
        texts = self.render_all([r.prompt for r in requests])
        prompt_ids = self._prompt_tokens(texts, flags)
        joint = self._joint_ids(texts, [r.continuation for r in requests], prompt_ids, flags)
        for i, p in enumerate(prompt_ids):
            if not p:
                raise ValueError(f"score request {i}: nothing precedes the continuation (empty prompt, no BOS)")
        cands: list[list[int] | None] = [
            j[len(p):] if len(j) > len(p) and j[: len(p)] == p else None for p, j in zip(prompt_ids, joint, strict=True)
        ]
        out: list[ScoringEncoding | None] = [None] * len(requests)
        restarts = self._decode_restarts()
        cut = [_after_last(p, restarts) for p in prompt_ids] if restarts else [0] * len(prompt_ids)
        prompt_text = self._decode_distinct([p[k:] for p, k in zip(prompt_ids, cut, strict=True)])
        self._accept(out, "joint", cands, prompt_ids, cut, prompt_text, requests)
        todo = [i for i, e in enumerate(out) if e is None]
        if todo:
            alone = self._tokenize([requests[i].continuation for i in todo], [False] * len(todo))
            standalone: dict[int, list[int]] = dict(zip(todo, alone, strict=True))
            self._accept(out, "standalone", [standalone.get(i) for i in range(len(requests))], prompt_ids, cut,
                         prompt_text, requests)
            for anchor in _ANCHORS:
                todo = [i for i, e in enumerate(out) if e is None]
                if not todo:
                    break
                a = self._tokenize([anchor], [False])[0]
                ac = self._tokenize([anchor + requests[i].continuation for i in todo], [False] * len(todo))
                anchored: dict[int, list[int]] = {
                    i: x[len(a):] for i, x in zip(todo, ac, strict=True) if len(x) > len(a) and x[: len(a)] == a
                }
                self._accept(out, "anchored", [anchored.get(i) for i in range(len(requests))], prompt_ids, cut,
                             prompt_text, requests)
            for i in [i for i, e in enumerate(out) if e is None]:
                ids = cands[i] or standalone[i]
                if not ids:
                    raise ValueError(f"score request {i}: continuation produced no tokens")
                log.warning("score request %d: no tokenisation of the continuation %r decodes back to it; "
                            "scoring %s", i, requests[i].continuation, self.tokenizer.convert_ids_to_tokens(ids))
                out[i] = ScoringEncoding(tuple(prompt_ids[i]), tuple(ids), "unverified")
        return out  # type: ignore[return-value]

    def _split_tokens(self) -> dict[int, str]:
        """Added tokens at which the tokenizers library cuts every text into pieces it tokenises independently:
        id -> content. The library extracts added tokens before normalising and pre-tokenising, so the text
        after an occurrence of one tokenises the same whatever precedes it. Only tokens for which that holds
        plainly: matched on the raw text (not `normalized`, or no normaliser), without `lstrip`/`rstrip`/
        `single_word`, and overlapping no other added token (none contains it, none ends with a start of it or
        starts with an end of it, so no match can run across it); none when special tokens are encoded as text
        (`encode_special_tokens`) or the wrapper is not read through the library (`_rust_tokenizer`)."""
        self._fresh_caches()
        if self._splitters is not None:
            return self._splitters
        bt = self._rust_tokenizer()
        found: dict[int, str] = {}
        if bt is not None and not getattr(bt, "encode_special_tokens", False) and hasattr(bt, "get_added_tokens_decoder"):
            added = bt.get_added_tokens_decoder()
            contents = [t.content for t in added.values()]

            def overlaps(a: str, b: str) -> bool:  # b contains a, or a match of b could run into a (either side)
                return (a != b and a in b) or any(a.startswith(b[-k:]) or a.endswith(b[:k])
                                                  for k in range(1, min(len(a), len(b))))

            for tid, tok in added.items():
                c = tok.content
                if (not c or tok.lstrip or tok.rstrip or tok.single_word or (tok.normalized and bt.normalizer is not None)
                        or any(overlaps(c, other) for other in contents if other != c)):
                    continue
                found[int(tid)] = c
        self._splitters = found
        return found

    def _joint_ids(self, texts: Sequence[str], continuations: Sequence[str], prompt_ids: Sequence[list[int]],
                   flags: Sequence[bool]) -> list[list[int]]:
        """The tokenisation of each text + continuation, as `_tokenize` gives it, re-tokenising only the text
        after the prompt's last splitting token (`_split_tokens`; a chat template puts one right before the
        assistant turn): the prompt's ids up to it, then the ids of the rest + continuation (kept per text, so a
        run's few distinct answer tails are tokenised once). Used where the prompt's ids end with that token
        and the rest's own ids, i.e. where the cut is the library's own, and the special-token rule adds none
        (post-processing, e.g. a BOS, applies to the whole text); the other texts are tokenised whole."""
        split = self._split_tokens()
        out: list[list[int] | None] = [None] * len(texts)
        cuts: dict[int, tuple[int, str]] = {}  # i -> (prompt ids kept, text re-tokenised with the continuation)
        if split:
            for i, (text, ids, flag) in enumerate(zip(texts, prompt_ids, flags, strict=True)):
                if flag:
                    continue
                k = _after_last(ids, split)
                if k == 0:
                    continue
                token = split[ids[k - 1]]
                at = text.rfind(token)
                if at >= 0:
                    cuts[i] = (k, text[at + len(token):])
        tails = self._pieces({tail for _, tail in cuts.values()})
        cuts = {i: (k, tail) for i, (k, tail) in cuts.items() if list(tails[tail]) == prompt_ids[i][k:]}
        joint = self._pieces({tail + continuations[i] for i, (_, tail) in cuts.items()})
        self._spliced += len(cuts)
        whole = []
        for i in range(len(texts)):
            if i in cuts:
                k, tail = cuts[i]
                out[i] = prompt_ids[i][:k] + list(joint[tail + continuations[i]])
            else:
                whole.append(i)
        if whole:
            for i, ids in zip(whole, self._tokenize([texts[i] + continuations[i] for i in whole],
                                                    [flags[i] for i in whole]), strict=True):
                out[i] = ids
        return out  # type: ignore[return-value]

    def _pieces(self, texts: set[str]) -> dict[str, array[int]]:
        """Ids of texts tokenised without special tokens, through the tail cache (`_joint_ids`)."""
        got = {t: self._piece_ids[t] for t in texts if t in self._piece_ids}
        todo = [t for t in texts if t not in got]
        for t, ids in zip(todo, self._tokenize(todo, [False] * len(todo)), strict=True):
            got[t] = array("I", ids)
            _remember(self._piece_ids, t, got[t])
        return got

    def tokens_of(self, ids: Sequence[int]) -> tuple[str, ...]:
        """The tokens of `ids` as `convert_ids_to_tokens` names them (kept per id: a run asks for the same few)."""
        out = []
        for tid in ids:
            t = self._token_str.get(tid)
            if t is None:
                t = self._token_str[tid] = self.tokenizer.convert_ids_to_tokens(int(tid))
            out.append(t)
        return tuple(out)

    def _accept(self, out: list[ScoringEncoding | None], method: str, cands: Sequence[list[int] | None],
                prompt_ids: Sequence[list[int]], cut: Sequence[int], prompt_text: Sequence[str],
                requests: Sequence[ScoreRequest]) -> None:
        """Fill the open slots of `out` whose candidate ids decode back to the continuation after the prompt.

        decode(prompt + candidate) == decode(prompt) + continuation is checked on the prompt's ids from `cut[i]`
        on (after its last `_decode_restarts` token: the same outcome, as decoding restarts there; 0 = the whole
        prompt), with `prompt_text[i]` the decoding of those ids."""
        idxs = [i for i, e in enumerate(out) if e is None and cands[i]]
        if not idxs:
            return
        texts = self._decode_distinct([prompt_ids[i][cut[i]:] + cands[i] for i in idxs])  # type: ignore[operator]
        for i, text in zip(idxs, texts, strict=True):
            if text == prompt_text[i] + requests[i].continuation:
                out[i] = ScoringEncoding(tuple(prompt_ids[i]), tuple(cands[i]), method)  # type: ignore[arg-type]

    def eos_token_ids(self, generation_eos: Any = None) -> list[int]:
        """The ids that end a generation: the model's generation_config EOS id(s) and the tokenizer's."""
        ids = set(generation_eos if isinstance(generation_eos, list | tuple) else
                  [generation_eos] if generation_eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return sorted(int(e) for e in ids)

    def finish_generation(self, token_ids: Sequence[int], eos_ids: Sequence[int], pad_id: int | None, box: bool,
                          stop: tuple[str, ...]) -> str:
        """The returned text of one generation from its new token ids, the same for every engine.

        Cut at the first EOS, trailing padding dropped, decoded without special tokens, then cut at the
        brace closing the pre-filled box (kept) or before the first stop string.
        """
        toks = cut_at_eos(list(token_ids), eos_ids)
        while pad_id is not None and toks and toks[-1] == pad_id:  # rows stopped early are padded
            toks.pop()
        return postprocess(self.tokenizer.decode(toks, skip_special_tokens=True), box, stop)


def _after_last(ids: Sequence[int], tokens: Container[int]) -> int:
    """The index after the last of `ids` that is one of `tokens` (0 when none is): where the joint tokenisation is
    spliced (`_joint_ids`, at the splitting tokens) and where the decode check starts (`_decode_restarts`)."""
    j = len(ids) - 1
    while j >= 0 and ids[j] not in tokens:
        j -= 1
    return j + 1


def cut_at_eos(toks: list[int], eos_ids: Sequence[int]) -> list[int]:
    """The tokens before the first EOS id."""
    for k, t in enumerate(toks):
        if t in eos_ids:
            return toks[:k]
    return toks


def postprocess(text: str, box: bool, stop: tuple[str, ...]) -> str:
    """Cut generated text at the brace closing the pre-filled box (kept) or the first stop string."""
    if box:
        from zcp.core.answers import close_brace_index

        end = close_brace_index(text)
        if end is not None:
            return text[: end + 1]
    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text
