"""transformers backend: batched teacher-forced scoring and generation for any causal LM.

Scoring tokenises prompt + continuation *jointly* and finds the continuation's tokens by character
offsets, so boundary merges (e.g. `{1` as one token) are handled as the model would see them: the
first continuation token is the one that covers the first continuation character, and it is scored
given everything before it. Requests are sorted by length and packed into batches under a token
budget (right padding for scoring, left padding for generation).
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


@dataclass
class _Encoded:
    ids: list[int]
    start: int  # index of the first continuation token
    end: int  # one past the last continuation token


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
            raise ValueError("HFBackend needs a fast tokenizer (character offsets are required for scoring)")
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

    # ------------------------------------------------------------------ scoring
    def encode_for_scoring(self, requests: Sequence[ScoreRequest]) -> list[_Encoded]:
        """Joint tokenisation of prompt+continuation; continuation tokens located by char offsets."""
        out: list[_Encoded] = [None] * len(requests)  # type: ignore[list-item]
        groups: dict[bool, list[int]] = {}
        texts, bounds = [], []
        for i, r in enumerate(requests):
            if not r.continuation:
                raise ValueError(f"score request {i}: empty continuation")
            p = self.render(r.prompt)
            texts.append(p + r.continuation)
            bounds.append(len(p))
            groups.setdefault(self._special_tokens_for(r.prompt), []).append(i)
        for add_special, idxs in groups.items():
            enc = self.tokenizer([texts[i] for i in idxs], add_special_tokens=add_special,
                                 return_offsets_mapping=True)
            for j, i in enumerate(idxs):
                ids, offs = enc["input_ids"][j], enc["offset_mapping"][j]
                b = bounds[i]
                cont = [k for k, (s, e) in enumerate(offs) if e > b and e > s]
                if not cont:
                    raise ValueError(f"score request {i}: continuation produced no tokens")
                start, end = cont[0], cont[-1] + 1
                if start == 0:
                    raise ValueError(f"score request {i}: nothing precedes the continuation (empty prompt, no BOS)")
                out[i] = _Encoded(ids=list(ids), start=start, end=end)
        return out

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

    def collate(self, seqs: Sequence[list[int]], left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad token lists into (input_ids, attention_mask) on the model's device."""
        n = max(len(s) for s in seqs)
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
        """Teacher-forced log P(t_k | prompt, t_<k) for every continuation token, batched."""
        if not requests:
            return []
        enc = self.encode_for_scoring(requests)
        results: list[ScoreResult | None] = [None] * len(requests)
        batches = self.batches([e.end for e in enc], self.max_batch_size)
        for batch in _progress(batches, self.progress, "score"):
            # Tokens after the continuation are never needed: cut each row at its `end`.
            ids, mask = self.collate([enc[i].ids[: enc[i].end] for i in batch])
            # Logits only from the first position any row needs (rows are length-sorted, so that is the last
            # few): the LM head over every position costs compute and, with a 150k vocabulary, gigabytes.
            keep = ids.shape[1] - min(enc[i].start for i in batch) + 1
            logits = self._logits(ids, mask, keep)
            offset = ids.shape[1] - logits.shape[1]
            rows, pos, tgt = [], [], []
            for r, i in enumerate(batch):
                e = enc[i]
                rows += [r] * (e.end - e.start)
                pos += range(e.start - 1 - offset, e.end - 1 - offset)
                tgt += e.ids[e.start : e.end]
            sel = logits[torch.tensor(rows, device=self.device), torch.tensor(pos, device=self.device)]
            lp = torch.log_softmax(sel.float(), dim=-1)
            tok_lp = lp.gather(1, torch.tensor(tgt, device=self.device)[:, None])[:, 0].tolist()
            k = 0
            for i in batch:
                n = enc[i].end - enc[i].start
                results[i] = ScoreResult(token_logprobs=tuple(tok_lp[k : k + n]),
                                         tokens=tuple(self.tokenizer.convert_ids_to_tokens(enc[i].ids[enc[i].start : enc[i].end])))
                k += n
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
        texts = [self.render(r.prompt) for r in requests]
        outputs: list[str] = [""] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            key = (r.max_new_tokens, r.stop, r.stop_at_box_close, r.temperature, r.seed,
                   self._special_tokens_for(r.prompt))
            groups.setdefault(key, []).append(i)
        for (max_new, stop, box, temp, seed, add_special), idxs in groups.items():
            enc = self.tokenizer([texts[i] for i in idxs], add_special_tokens=add_special)["input_ids"]
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
