"""transformers backend: batched teacher-forced scoring and generation for any causal LM.

Scoring conditions on exactly the token ids generation conditions on: the rendered prompt tokenised
ALONE, followed by the continuation's tokens as the model would emit them after it (rendering and that
tokenisation boundary live in `zcp.backends.tokenized.TokenizedBackend`, shared with the vLLM engine).

Scoring right-pads each row to a length bucket of its own (`padded_length`) and batches rows of one
bucket under a token budget, so a request's log-probs do not depend on the other requests (bit-exact
on CPU with MKL, measured). Every forward gets the attention mask, so padding is hidden whatever the model's
attention does. Generation sorts prompts by length and left-pads them.

Building a backend changes nothing process-wide: no allocator settings, no garbage-collector state. Such
tuning belongs to the program that runs it (e.g. `MALLOC_*_` environment variables, a preloaded allocator).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence
from typing import Any

import torch

from zcp.backends.base import GenerationRequest, ScoreRequest, ScoreResult
from zcp.backends.tokenized import ScoringEncoding, TokenizedBackend, cut_at_eos, postprocess
from zcp.core.io import model_fingerprint

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


def _resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[str(dtype)]


class HFBackend(TokenizedBackend):
    """A transformers causal LM behind the `Backend` interface.

    `max_batch_tokens` bounds padded tokens per forward pass (batch size × longest sequence);
    `max_batch_size` bounds rows. Rendering options (`chat_template_kwargs`, `chat`, `plain_template`,
    `max_length`) are those of `TokenizedBackend`.
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str | None = None, max_batch_tokens: int = 16384,
                 max_batch_size: int = 64, gen_batch_size: int = 32, plain_template: str = "{user}\n{prefix}",
                 chat_template_kwargs: dict[str, Any] | None = None, chat: bool = True,
                 max_length: int | None = None, progress: bool = False) -> None:
        self._init_tokenizer(tokenizer, chat_template_kwargs=chat_template_kwargs, chat=chat,
                             plain_template=plain_template, max_length=max_length)
        self.model = model.eval()
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.fingerprint = ""
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_size = max_batch_size
        self.gen_batch_size = gen_batch_size
        self.progress = progress
        self.device = next(model.parameters()).device
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        self.pad_id = int(pad)
        self.eos_ids = self.eos_token_ids(getattr(model.generation_config, "eos_token_id", None))
        self._logits_to_keep = True

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *, adapter: str | None = None, dtype: str = "auto",
                        device: str | None = None, trust_remote_code: bool = False, **kwargs: Any) -> HFBackend:
        """Load a local folder or hub id (safetensors only; `adapter` = a PEFT LoRA folder merged in)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        check_weights_fit_config(path, trust_remote_code=trust_remote_code)
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

    def model_positions(self) -> int | None:
        """Positions the model has (max_position_embeddings), or None when the config does not say."""
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if n else None

    @property
    def generate_block(self) -> int:
        """Prompts per `generate` call that fill one generation batch (`gen_batch_size`): detection's default
        chunks hold at least this many units when its metrics generate (`zcp.probe.detect.generation_floor`)."""
        return self.gen_batch_size

    # ------------------------------------------------------------------ scoring
    @property
    def score_block(self) -> int:
        """Requests per `score` call that fill its batches: 4 x `max_batch_size` (a call's rows spread over a few
        length buckets, each batched apart). Detection at the default chunk size probes this many units per call
        (`zcp.probe.detect.probe_block`): fewer, fuller forward passes, the same scores (batch invariance)."""
        return 4 * self.max_batch_size

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
        """Pad token lists (to the longest, or to `length`) into (input_ids, attention_mask) on the model's device.

        Built from one flat buffer of every row's ids and the rows' lengths, not nested lists (converting those
        cost as much as the rest of scoring's host work): the mask compares each position with its row's length
        (right padding: position < length; left: position >= width - length), and the ids fill the mask's
        positions in row order, so each row holds its ids, then (or after) the padding."""
        lens = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        n = max(int(lens.max()) if len(seqs) else 0, length or 0)
        flat = array("q")
        for s in seqs:
            flat.extend(s)
        pos = torch.arange(n)
        mask = pos >= n - lens[:, None] if left else pos < lens[:, None]
        ids = torch.full((len(seqs), n), self.pad_id, dtype=torch.long)
        if len(flat):
            ids[mask] = torch.frombuffer(flat, dtype=torch.long)
        return ids.to(self.device), mask.long().to(self.device)

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
            at = (torch.tensor(rows, device=self.device), torch.tensor(pos, device=self.device))
            sel = logits[at]
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
                                         tokens=self.tokens_of(cont),
                                         token_means=tuple(mu[k : k + len(cont)]) if stats else (),
                                         token_stds=tuple(sd[k : k + len(cont)]) if stats else ())
                k += len(cont)
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ generation
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
                    outputs[idxs[j]] = self.finish_generation(new[row], self.eos_ids, self.pad_id, box, stop)
        return outputs


def check_weights_fit_config(path: str | os.PathLike[str], trust_remote_code: bool = False) -> None:
    """ConfigError (one line) when a local folder's config.json does not describe its weights, before any weight is
    read: the shapes the config builds (the model on the meta device: no memory) against the shapes the safetensors
    headers hold, for the tensors both name. transformers itself raises a RuntimeError pointing at a many-line load
    report, after reading the weights; a config it cannot build a model from is named the same way. A hub id or a
    folder without safetensors files, or a pre-quantized checkpoint (packed shapes of its own), is left to the
    loader."""
    from pathlib import Path

    from transformers import AutoConfig, AutoModelForCausalLM

    from zcp.errors import ConfigError

    folder = Path(path).expanduser()
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files or not (folder / "config.json").is_file():
        return
    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
        if getattr(config, "quantization_config", None):
            return
        with torch.device("meta"):
            built = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as e:  # an unknown model_type, a value the architecture refuses: the file is the user's
        why = " ".join(str(e).split())[:300]
        raise ConfigError(f"{folder}: config.json does not describe a causal LM transformers can build ({why})"
                          ) from None
    expected = {k: tuple(v.shape) for k, v in built.state_dict().items()}
    from safetensors import safe_open

    differ: list[str] = []
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                shape = tuple(st.get_slice(key).get_shape())
                if key in expected and expected[key] != shape:
                    differ.append(f"{key}: weights {list(shape)}, config {list(expected[key])}")
    if differ:
        raise ConfigError(f"{folder}: config.json does not match the weights ({differ[0]}"
                          + (f"; {len(differ) - 1} more tensors differ" if len(differ) > 1 else "")
                          + "): use the config.json saved with these weights")


def from_config(cfg: Any, progress: bool = False) -> HFBackend:
    """The registry's builder (`model.backend=hf`): a `zcp.config.model.ModelConfig` loaded with transformers."""
    return HFBackend.from_pretrained(
        cfg.path, adapter=cfg.adapter, dtype=cfg.dtype, device=cfg.device, trust_remote_code=cfg.trust_remote_code,
        max_batch_tokens=cfg.max_batch_tokens, max_batch_size=cfg.batch_size, gen_batch_size=cfg.gen_batch_size,
        chat_template_kwargs=cfg.chat_template_kwargs, chat=cfg.chat, max_length=cfg.max_length, progress=progress)


_cut_at_eos = cut_at_eos  # names kept for callers of the earlier module layout
_postprocess = postprocess
__all__ = ["HFBackend", "ScoringEncoding", "padded_length"]


def _stopping(backend: HFBackend, prompt_len: int, box: bool, stop: tuple[str, ...]) -> Any:
    """A StoppingCriteriaList ending each row of a batch where `finish_generation` would cut it: at the brace that
    closes the pre-filled box, or once a stop string is in the row's text. transformers stops a row when it is done
    (its later tokens are padding, cut by `finish_generation`) and the batch when every row is, so a row that found
    its end stops costing steps of its own and a batch ends with its last unfinished row.

    The check is incremental: a row's brace depth is updated from its newest token alone, and a stop string, which
    must end in the newest token's text when it first appears, is looked for in the decoding of the row's last few
    tokens (at least the longest stop string's length in characters, plus one for a character cut at the window's
    start); a hit there is confirmed on the whole generated text (the rule `postprocess` applies), so a row is
    never stopped before its text holds a stop string and the returned text is the same as without the criterion.
    Rows already done are not looked at again."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    longest = max((len(s) for s in stop if s), default=0)
    stops = tuple(s for s in stop if s)

    def decode(ids: list[int]) -> str:
        return backend.tokenizer.decode(ids, skip_special_tokens=True)

    class _BoxOrStop(StoppingCriteria):
        """Per-row stop: the pre-filled box closed (brace depth back to 0) or a stop string seen."""

        def __init__(self) -> None:
            self.depth: list[int] = []
            self.done: list[bool] = []

        def _has_stop(self, new: torch.Tensor, r: int) -> bool:
            n = new.shape[1]
            k = min(n, longest + 2)
            while True:
                tail = decode(new[r, n - k:].tolist())
                if k >= n or len(tail) > longest:
                    break
                k = min(n, 2 * k)  # tokens that decode to nothing (special) or to part of a character
            if not any(s in tail for s in stops):
                return False
            return k >= n or any(s in decode(new[r].tolist()) for s in stops)

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kw: Any) -> torch.BoolTensor:
            n = input_ids.shape[0]
            if not self.done:
                self.depth, self.done = [1] * n, [False] * n
            new = input_ids[:, prompt_len:]
            if new.shape[1]:
                last = new[:, -1].tolist()
                for r in range(n):
                    if self.done[r]:
                        continue
                    if box:
                        for ch in backend._text_of(int(last[r])):
                            if self.depth[r] <= 0:
                                break
                            if ch == "{":
                                self.depth[r] += 1
                            elif ch == "}":
                                self.depth[r] -= 1
                        if self.depth[r] <= 0:
                            self.done[r] = True
                            continue
                    if stops and self._has_stop(new, r):
                        self.done[r] = True
            return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]

    return StoppingCriteriaList([_BoxOrStop()])


def _progress(it: list, enabled: bool, desc: str) -> Any:
    if not enabled or len(it) < 2:
        return it
    from tqdm.auto import tqdm

    return tqdm(it, desc=desc, leave=False)
