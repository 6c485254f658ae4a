"""transformers backend: batched teacher-forced scoring and generation for any causal LM.

Scoring conditions on exactly the token ids generation conditions on: the rendered prompt tokenised
ALONE (`encode_prompts`, shared by `generate` and `score`), followed by the continuation's tokens as
the model would emit them after it (`encode_for_scoring`, see its docstring for the rule). Tokenising
prompt + continuation jointly would let a pre-tokenizer merge the prompt's last character with the
answer's first (Qwen2-style `{-`, `{\\`, `{(`): p_first would then score a token the model can never
emit after the pre-filled `\\boxed{`.

Scoring right-pads each row to a length bucket of its own (`padded_length`) and batches rows of one
bucket under a token budget, so a request's log-probs do not depend on the other requests (bit-exact
on CPU with MKL, measured). Generation sorts prompts by length and left-pads them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from zcp.backends.base import GenerationRequest, Prompt, ScoreRequest, ScoreResult
from zcp.io import model_fingerprint

log = logging.getLogger(__name__)

# Texts put before a continuation whose standalone tokenisation does not decode back to it (a tokenizer
# that prepends a dummy space, SentencePiece `▁`): the anchor's own tokens are dropped afterwards.
_ANCHORS = ("\n", "\n\n", "0", "a", " ", "§")
_MIN_HEAD_ROWS = 16  # see `score`


def padded_length(n: int, limit: int | None = None) -> int:
    """The length a scored row of `n` tokens is right-padded to, whatever its batch: a function of `n` alone.

    Buckets at least 8 tokens wide, 8 per power of two (at most 1/8 padding), capped at `limit` (the
    model's positions). Batches only hold rows of one padded length, so a row meets the same kernels
    (attention over the same key length, same blocking) alone or in any batch: its log-probs do not
    depend on its companions.
    """
    step = max(8, 1 << max(0, n.bit_length() - 4))
    padded = -(-n // step) * step
    return max(n, min(padded, limit)) if limit else padded


@dataclass(frozen=True)
class ScoringEncoding:
    """The token ids one score request is scored on.

    `prompt_ids` are exactly the ids `HFBackend.generate` feeds the model for the same prompt;
    `continuation_ids` are the continuation's tokens after them, scored by teacher forcing (the first
    one is p_first's token). `method` says how the continuation was tokenised: "joint" (the joint
    tokenisation of prompt + continuation starts with `prompt_ids`; its remainder), "standalone" (the
    continuation tokenised on its own), "anchored" (tokenised after an anchor text whose tokens were
    dropped) or "unverified" (no candidate decoded back to the continuation, e.g. a normalising
    tokenizer; the joint remainder, else the standalone tokens, are used and a warning is logged).
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


def _resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[str(dtype)]


class HFBackend:
    """A transformers causal LM behind the `Backend` interface.

    `max_batch_tokens` bounds padded tokens per forward pass (batch size × longest sequence);
    `max_batch_size` bounds rows. `plain_template` renders prompts for models without a chat
    template (base models): by default the question, a newline, then the assistant prefix.
    """

    supports_prefill = True
    supports_logprobs = True

    def __init__(self, model: Any, tokenizer: Any, *, name: str | None = None, max_batch_tokens: int = 16384,
                 max_batch_size: int = 64, gen_batch_size: int = 32, plain_template: str = "{user}\n{prefix}",
                 progress: bool = False) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("HFBackend needs a fast (tokenizers-backed) tokenizer")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_size = max_batch_size
        self.gen_batch_size = gen_batch_size
        self.plain_template = plain_template
        self.progress = progress
        self.device = next(model.parameters()).device
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        self.pad_id = int(pad)
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = sorted(int(e) for e in eos_ids)
        self._token_text: dict[int, str] = {}
        self._logits_to_keep = True

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *, adapter: str | None = None, dtype: str = "auto",
                        device: str | None = None, trust_remote_code: bool = False, **kwargs: Any) -> HFBackend:
        """Load a local folder or hub id (safetensors only; `adapter` = a PEFT LoRA folder merged in)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=_resolve_dtype(dtype, dev), use_safetensors=True, trust_remote_code=trust_remote_code
        ).to(dev)
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
        backend = cls(model, tok, name=str(path), **kwargs)
        # what the weights are, not where they live: results of a model rewritten in place are never reused
        backend.fingerprint = f"{model_fingerprint(path) or path}+{model_fingerprint(adapter) or adapter}"
        return backend

    # ------------------------------------------------------------------ prompts
    def render(self, prompt: Prompt) -> str:
        """The exact text the model conditions on (chat template + pre-filled assistant prefix)."""
        if not prompt.chat:
            return prompt.user + prompt.assistant_prefix
        if getattr(self.tokenizer, "chat_template", None):
            messages = ([{"role": "system", "content": prompt.system}] if prompt.system else []) + [
                {"role": "user", "content": prompt.user}
            ]
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return text + prompt.assistant_prefix
        user = f"{prompt.system}\n\n{prompt.user}" if prompt.system else prompt.user
        return self.plain_template.format(user=user, prefix=prompt.assistant_prefix)

    def _special_tokens_for(self, prompt: Prompt) -> bool:
        # A rendered chat template already carries BOS etc. as text; raw/plain prompts get the
        # tokenizer's own special tokens (e.g. BOS for Llama-style base models).
        return not (prompt.chat and getattr(self.tokenizer, "chat_template", None))

    # ------------------------------------------------------------------ tokenisation
    @property
    def context_length(self) -> int | None:
        """Positions the model has (max_position_embeddings), or None when the config does not say."""
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if n else None

    def count_tokens(self, prompts: Sequence[Prompt], texts: Sequence[str] = ()) -> tuple[list[int], list[int]]:
        """Token counts of rendered prompts (as generation sees them) and of bare texts (e.g. answers)."""
        plen = [len(ids) for ids in self.encode_prompts(prompts)] if prompts else []
        tlen = [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]] if texts else []
        return plen, tlen

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """Token ids of each rendered prompt, tokenised alone: what `generate` and `score` condition on."""
        texts = [self.render(p) for p in prompts]
        return self._tokenize(texts, [self._special_tokens_for(p) for p in prompts])

    def _tokenize(self, texts: Sequence[str], add_special: Sequence[bool]) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in texts]
        for flag in sorted(set(add_special)):
            idxs = [i for i, f in enumerate(add_special) if f == flag]
            enc = self.tokenizer([texts[i] for i in idxs], add_special_tokens=flag)["input_ids"]
            for i, ids in zip(idxs, enc, strict=True):
                out[i] = list(ids)
        return out

    def _decode(self, seqs: Sequence[Sequence[int]]) -> list[str]:
        # Verbatim: special tokens kept, no clean-up of spaces before punctuation.
        return self.tokenizer.batch_decode([list(s) for s in seqs], skip_special_tokens=False,
                                           clean_up_tokenization_spaces=False)

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
        standalone ids, are used and a warning is logged. Any other engine (vLLM prompt_token_ids, ...)
        should score these same ids.
        """
        for i, r in enumerate(requests):
            if not r.continuation:
                raise ValueError(f"score request {i}: empty continuation")
        flags = [self._special_tokens_for(r.prompt) for r in requests]
        texts = [self.render(r.prompt) for r in requests]
        prompt_ids = self._tokenize(texts, flags)
        joint = self._tokenize([t + r.continuation for t, r in zip(texts, requests, strict=True)], flags)
        for i, p in enumerate(prompt_ids):
            if not p:
                raise ValueError(f"score request {i}: nothing precedes the continuation (empty prompt, no BOS)")
        prompt_text = self._decode(prompt_ids)
        cands: list[list[int] | None] = [
            j[len(p):] if len(j) > len(p) and j[: len(p)] == p else None for p, j in zip(prompt_ids, joint, strict=True)
        ]
        out: list[ScoringEncoding | None] = [None] * len(requests)
        self._accept(out, "joint", cands, prompt_ids, prompt_text, requests)
        todo = [i for i, e in enumerate(out) if e is None]
        if todo:
            alone = self._tokenize([requests[i].continuation for i in todo], [False] * len(todo))
            standalone: dict[int, list[int]] = dict(zip(todo, alone, strict=True))
            self._accept(out, "standalone", [standalone.get(i) for i in range(len(requests))], prompt_ids,
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
                self._accept(out, "anchored", [anchored.get(i) for i in range(len(requests))], prompt_ids,
                             prompt_text, requests)
            for i in [i for i, e in enumerate(out) if e is None]:
                ids = cands[i] or standalone[i]
                if not ids:
                    raise ValueError(f"score request {i}: continuation produced no tokens")
                log.warning("score request %d: no tokenisation of the continuation %r decodes back to it; "
                            "scoring %s", i, requests[i].continuation, self.tokenizer.convert_ids_to_tokens(ids))
                out[i] = ScoringEncoding(tuple(prompt_ids[i]), tuple(ids), "unverified")
        return out  # type: ignore[return-value]

    def _accept(self, out: list[ScoringEncoding | None], method: str, cands: Sequence[list[int] | None],
                prompt_ids: Sequence[list[int]], prompt_text: Sequence[str], requests: Sequence[ScoreRequest]) -> None:
        """Fill the open slots of `out` whose candidate ids decode back to the continuation after the prompt."""
        idxs = [i for i, e in enumerate(out) if e is None and cands[i]]
        if not idxs:
            return
        texts = self._decode([prompt_ids[i] + cands[i] for i in idxs])  # type: ignore[operator]
        for i, text in zip(idxs, texts, strict=True):
            if text == prompt_text[i] + requests[i].continuation:
                out[i] = ScoringEncoding(tuple(prompt_ids[i]), tuple(cands[i]), method)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ scoring
    def batches(self, lengths: Sequence[int], max_rows: int) -> list[list[int]]:
        """Indices grouped into length-sorted batches under the token budget."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        batches: list[list[int]] = []
        cur: list[int] = []
        for i in order:
            longest = lengths[cur[0]] if cur else lengths[i]
            if cur and (len(cur) + 1 > max_rows or longest * (len(cur) + 1) > self.max_batch_tokens):
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
        return batches

    def score_batches(self, lengths: Sequence[int]) -> list[tuple[int, list[int]]]:
        """(padded length, indices) of each scoring batch: rows of one `padded_length` only, longest first."""
        limit = getattr(self.model.config, "max_position_embeddings", None)
        buckets: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            buckets.setdefault(padded_length(n, limit), []).append(i)
        out = []
        for width in sorted(buckets, reverse=True):
            idxs = buckets[width]
            rows = max(1, min(self.max_batch_size, self.max_batch_tokens // width))
            out += [(width, idxs[k : k + rows]) for k in range(0, len(idxs), rows)]
        return out

    def collate(self, seqs: Sequence[Sequence[int]], left: bool = False,
                length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad token lists (to the longest, or to `length`) into (input_ids, attention_mask) on the model's device."""
        n = max([len(s) for s in seqs] + [length or 0])
        ids = torch.full((len(seqs), n), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for r, s in enumerate(seqs):
            if left:
                ids[r, n - len(s):] = torch.tensor(s)
                mask[r, n - len(s):] = 1
            else:
                ids[r, : len(s)] = torch.tensor(s)
                mask[r, : len(s)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _logits(self, ids: torch.Tensor, mask: torch.Tensor, keep: int) -> torch.Tensor:
        """Logits of the last `keep` positions (all positions for a model without `logits_to_keep`)."""
        if self._logits_to_keep:
            try:
                return self.model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
            except TypeError:  # a remote-code model without the argument
                self._logits_to_keep = False
        return self.model(input_ids=ids, attention_mask=mask).logits

    @torch.inference_mode()
    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Teacher-forced log P(t_k | prompt, t_<k) for every continuation token, batched.

        Scored on `encode_for_scoring`'s ids: the prompt exactly as `generate` encodes it, so p_first is
        the probability of the first token the model would emit after the pre-filled prefix. A request's
        log-probs do not depend on the other requests (batch invariance, see `padded_length`; bit-exact on
        CPU with MKL, measured; on GPU kernels chosen by batch shape leave float noise).
        """
        if not requests:
            return []
        enc = self.encode_for_scoring(requests)
        results: list[ScoreResult | None] = [None] * len(requests)
        for width, batch in _progress(self.score_batches([e.end for e in enc]), self.progress, "score"):
            ids, mask = self.collate([enc[i].ids for i in batch], length=width)
            # Logits only from the first position any row needs: the LM head over every position costs
            # compute and, with a 150k vocabulary, gigabytes. But at least _MIN_HEAD_ROWS rows in all: BLAS
            # takes special paths for a handful of rows (gemv for one, small-M kernels) whose row results
            # differ from its blocked kernel's, so a short request alone would get other logits than in a batch.
            keep = ids.shape[1] - min(enc[i].start for i in batch) + 1
            keep = max(keep, min(ids.shape[1], -(-_MIN_HEAD_ROWS // len(batch))))
            logits = self._logits(ids, mask, keep)
            offset = ids.shape[1] - logits.shape[1]
            rows, pos, tgt = [], [], []
            for r, i in enumerate(batch):
                e = enc[i]
                rows += [r] * len(e.continuation_ids)
                pos += range(e.start - 1 - offset, e.end - 1 - offset)
                tgt += e.continuation_ids
            sel = logits[torch.tensor(rows, device=self.device), torch.tensor(pos, device=self.device)]
            lp = torch.log_softmax(sel.float(), dim=-1)
            tok_lp = lp.gather(1, torch.tensor(tgt, device=self.device)[:, None])[:, 0].tolist()
            mu: list[float] = []
            sd: list[float] = []
            if any(requests[i].distribution_stats for i in batch):
                p = lp.exp()
                m = (p * lp).sum(-1)
                var = (p * lp.square()).sum(-1) - m.square()
                mu, sd = m.tolist(), var.clamp_min(0).sqrt().tolist()
            k = 0
            for i in batch:
                cont = enc[i].continuation_ids
                stats = requests[i].distribution_stats
                results[i] = ScoreResult(token_logprobs=tuple(tok_lp[k : k + len(cont)]),
                                         tokens=tuple(self.tokenizer.convert_ids_to_tokens(list(cont))),
                                         token_means=tuple(mu[k : k + len(cont)]) if stats else (),
                                         token_stds=tuple(sd[k : k + len(cont)]) if stats else ())
                k += len(cont)
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ generation
    def _text_of(self, tid: int) -> str:
        t = self._token_text.get(tid)
        if t is None:
            t = self._token_text[tid] = self.tokenizer.decode([tid])
        return t

    @torch.inference_mode()
    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Generated continuations (greedy unless temperature > 0), batched by settings and length."""
        if not requests:
            return []
        prompt_ids = self.encode_prompts([r.prompt for r in requests])  # the ids `score` conditions on too
        outputs: list[str] = [""] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.max_new_tokens, r.stop, r.stop_at_box_close, r.temperature, r.seed), []).append(i)
        for (max_new, stop, box, temp, seed), idxs in groups.items():
            enc = [prompt_ids[i] for i in idxs]
            lengths = [len(x) for x in enc]
            for batch in _progress(self.batches(lengths, self.gen_batch_size), self.progress, "generate"):
                seqs = [enc[j] for j in batch]
                ids, mask = self.collate(seqs, left=True)
                kwargs: dict[str, Any] = {"max_new_tokens": max_new, "pad_token_id": self.pad_id,
                                          "eos_token_id": self.eos_ids or None}
                if temp and temp > 0:
                    if seed is not None:
                        torch.manual_seed(seed)
                    kwargs.update(do_sample=True, temperature=temp, top_p=1.0, top_k=0)
                else:
                    kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                if box or stop:
                    kwargs["stopping_criteria"] = _stopping(self, ids.shape[1], box, stop)
                gen = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
                new = gen[:, ids.shape[1]:].tolist()
                for row, j in enumerate(batch):
                    toks = _cut_at_eos(new[row], self.eos_ids)
                    while toks and toks[-1] == self.pad_id:  # rows stopped early are padded
                        toks.pop()
                    outputs[idxs[j]] = _postprocess(self.tokenizer.decode(toks, skip_special_tokens=True), box, stop)
        return outputs


def _cut_at_eos(toks: list[int], eos_ids: list[int]) -> list[int]:
    for k, t in enumerate(toks):
        if t in eos_ids:
            return toks[:k]
    return toks


def _postprocess(text: str, box: bool, stop: tuple[str, ...]) -> str:
    """Cut generated text at the brace closing the pre-filled box (kept) or the first stop string."""
    if box:
        from zcp.answers import close_brace_index

        end = close_brace_index(text)
        if end is not None:
            return text[: end + 1]
    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text


def _stopping(backend: HFBackend, prompt_len: int, box: bool, stop: tuple[str, ...]) -> Any:
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _BoxOrStop(StoppingCriteria):
        """Per-row stop: the pre-filled box closed (brace depth back to 0) or a stop string seen."""

        def __init__(self) -> None:
            self.depth: list[int] | None = None
            self.seen = 0

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kw: Any) -> torch.BoolTensor:
            n = input_ids.shape[0]
            if self.depth is None:
                self.depth = [1] * n
            done = torch.zeros(n, dtype=torch.bool, device=input_ids.device)
            new = input_ids[:, prompt_len:]
            last = new[:, -1].tolist() if new.shape[1] else []
            for r in range(n):
                if box and last:
                    for ch in backend._text_of(int(last[r])):
                        if self.depth[r] <= 0:
                            break
                        if ch == "{":
                            self.depth[r] += 1
                        elif ch == "}":
                            self.depth[r] -= 1
                    if self.depth[r] <= 0:
                        done[r] = True
                        continue
                if stop:
                    text = backend.tokenizer.decode(new[r].tolist(), skip_special_tokens=True)
                    if any(s in text for s in stop):
                        done[r] = True
            return done

    return StoppingCriteriaList([_BoxOrStop()])


def _progress(it: list, enabled: bool, desc: str) -> Any:
    if not enabled or len(it) < 2:
        return it
    from tqdm.auto import tqdm

    return tqdm(it, desc=desc, leave=False)
