"""vLLM backend (`model.backend=vllm`): the same probe as the transformers backend on vLLM's engine.

Prompts are rendered and tokenised by the shared `TokenizedBackend` (the model's own tokenizer, loaded
with transformers) and handed to vLLM as token ids, so both engines condition on identical ids:
- scoring: p_first/p_all from `prompt_logprobs=0` (vLLM returns the log-prob of each prompt token given
  the ones before it, from the raw logits) over exactly `encode_for_scoring`'s ids;
- generation: greedy (or seeded sampling) with the same stop rules: EOS ids of the model's
  generation_config and tokenizer, stop strings, the token budget, and the pre-filled `\\boxed{` cut at
  its closing brace (vLLM generates to the budget; the cut is the same function as transformers');
- LoRA adapters (`model.adapter`): by default merged into a copy of the weights (`model.vllm.merged_dir`,
  one folder per base+adapter content, reused), because vLLM's prompt log-probs with a LoRA request are
  wrong or crash (vllm-project/vllm#16668, #51594: measured here as a shape error in the CPU LoRA
  logits kernel); `model.vllm.adapter_mode=lora` serves the adapter through vLLM's LoRA support
  (`enable_lora`, no copy) for generation-only probes (acc/con) and refuses p metrics;
- tensor / data parallelism and the engine's memory settings come from `model.vllm.*`.

vLLM starts an engine process: a script that builds this backend must run its work under
`if __name__ == "__main__":` (the entry points in evaluate/ do), or set VLLM_ENABLE_V1_MULTIPROCESSING=0.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcp.backends.base import GenerationRequest, ScoreRequest, ScoreResult
from zcp.backends.tokenized import TokenizedBackend
from zcp.core.io import model_fingerprint

log = logging.getLogger(__name__)

_DTYPES = {"auto": "auto", "fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
           "fp16": "float16", "float16": "float16"}


class VLLMBackend(TokenizedBackend):
    """A vllm.LLM behind the `Backend` interface (see the module docstring)."""

    def __init__(self, llm: Any, tokenizer: Any, *, name: str = "vllm", lora_path: str | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, chat: bool = True,
                 max_length: int | None = None, progress: bool = False) -> None:
        self._init_tokenizer(tokenizer, chat_template_kwargs=chat_template_kwargs, chat=chat, max_length=max_length)
        self.llm = llm
        self.name = name
        self.fingerprint = ""
        self.progress = progress
        self._lora = None
        if lora_path:
            from vllm.lora.request import LoRARequest

            self._lora = LoRARequest("zcp-adapter", 1, str(lora_path))
        gen_eos = None
        try:
            gen_eos = llm.llm_engine.model_config.hf_config.eos_token_id
            from transformers import GenerationConfig

            gen_eos = GenerationConfig.from_pretrained(llm.llm_engine.model_config.model).eos_token_id or gen_eos
        except Exception:  # no generation_config.json: the model config's / tokenizer's EOS
            pass
        self.eos_ids = self.eos_token_ids(gen_eos)

    @classmethod
    def from_pretrained(cls, path: str, *, adapter: str | None = None, dtype: str = "auto",
                        trust_remote_code: bool = False, settings: Any = None, max_length: int | None = None,
                        **kwargs: Any) -> VLLMBackend:
        """Start a vLLM engine on a local folder or hub id (`settings`: zcp.config.model.VLLMSettings)."""
        from transformers import AutoTokenizer
        from vllm import LLM

        from zcp.config.model import VLLMSettings

        s = settings or VLLMSettings()
        fingerprint = f"{model_fingerprint(path) or path}+{model_fingerprint(adapter) or adapter}"
        if adapter and s.adapter_mode == "merge":
            path, adapter = merge_adapter(path, adapter, s.merged_dir, fingerprint, dtype, trust_remote_code), None
        engine: dict[str, Any] = {
            "model": str(path), "tokenizer": str(path), "dtype": _DTYPES[str(dtype)], "trust_remote_code": trust_remote_code,
            "tensor_parallel_size": s.tensor_parallel_size, "gpu_memory_utilization": s.gpu_memory_utilization,
            "enforce_eager": s.enforce_eager, "enable_prefix_caching": s.enable_prefix_caching, "seed": s.seed,
        }
        if s.data_parallel_size > 1:
            engine["data_parallel_size"] = s.data_parallel_size
        if s.max_model_len or max_length:
            engine["max_model_len"] = int(s.max_model_len or max_length)
        if s.max_num_seqs:
            engine["max_num_seqs"] = s.max_num_seqs
        if adapter:
            engine.update(enable_lora=True, max_lora_rank=s.max_lora_rank)
        engine.update(s.engine_kwargs)  # a mapping (VLLMSettings checks it)
        llm = LLM(**engine)
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        backend = cls(llm, tok, name=str(path), lora_path=adapter, max_length=max_length, **kwargs)
        backend.fingerprint = fingerprint
        return backend

    def model_positions(self) -> int | None:
        """The engine's max_model_len (the model's positions unless model.vllm.max_model_len lowers it)."""
        try:
            return int(self.llm.llm_engine.model_config.max_model_len)
        except AttributeError:
            return None

    def _run(self, prompts: list[list[int]], params: Any) -> list[Any]:
        from vllm.inputs import TokensPrompt

        return self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params,
                                 use_tqdm=self.progress, lora_request=self._lora)

    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Teacher-forced log P(t_k | prompt, t_<k) from vLLM's prompt log-probs, on `encode_for_scoring`'s ids."""
        if not requests:
            return []
        if self._lora is not None:
            raise NotImplementedError("model.vllm.adapter_mode=lora: vLLM's prompt log-probs with a LoRA request are "
                                      "wrong or crash (vllm-project/vllm#16668); use adapter_mode=merge for "
                                      "p_first/p_all, or probe.metrics=[acc,con]")
        if any(r.distribution_stats for r in requests):
            raise NotImplementedError("model.backend=vllm: distribution_stats (Min-K%++ mean/std over the whole "
                                      "vocabulary) needs every token's log-prob at every position, which vLLM's "
                                      "prompt_logprobs only returns as per-token dicts; use model.backend=hf")
        from vllm import SamplingParams

        enc = self.encode_for_scoring(requests)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        outs = self._run([e.ids for e in enc], params)
        results = []
        for e, o in zip(enc, outs, strict=True):
            pl = o.prompt_logprobs
            ids = e.ids
            lps = tuple(float(pl[k][ids[k]].logprob) for k in range(e.start, e.end))
            results.append(ScoreResult(token_logprobs=lps,
                                       tokens=tuple(self.tokenizer.convert_ids_to_tokens(list(e.continuation_ids)))))
        return results

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Generated continuations with the transformers backend's stop rules, batched by vLLM."""
        if not requests:
            return []
        from vllm import SamplingParams

        prompt_ids = self.encode_prompts([r.prompt for r in requests])
        params = []
        for r in requests:
            sample = bool(r.temperature and r.temperature > 0)
            params.append(SamplingParams(
                max_tokens=r.max_new_tokens, temperature=r.temperature if sample else 0.0,
                top_p=1.0, seed=r.seed if sample else None,
                stop=list(r.stop) or None, stop_token_ids=list(self.eos_ids), skip_special_tokens=True))
        outs = self._run(prompt_ids, params)
        return [self.finish_generation(o.outputs[0].token_ids, self.eos_ids, None, r.stop_at_box_close, r.stop)
                for r, o in zip(requests, outs, strict=True)]


def merge_adapter(path: str, adapter: str, root: str, fingerprint: str, dtype: str = "auto",
                  trust_remote_code: bool = False) -> str:
    """A folder holding `path`'s weights with the PEFT `adapter` merged in (and the tokenizer), built once.

    Named by the content fingerprint of base and adapter, so a changed adapter gets a new folder and a
    rerun reuses the old one; written to a temporary name and renamed (a killed merge leaves no folder).
    """
    import os

    from zcp.core.io import stable_hash

    out = Path(root) / f"{Path(str(adapter).rstrip('/')).name}__{stable_hash(fingerprint, 12)}"
    if (out / "config.json").exists():
        return str(out)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"auto": "auto", "float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                   "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[str(dtype)]
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype, use_safetensors=True,
                                                 trust_remote_code=trust_remote_code)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code).save_pretrained(tmp)
    os.replace(tmp, out)
    log.info("merged adapter %s into %s", adapter, out)
    return str(out)


def from_config(cfg: Any, progress: bool = False) -> VLLMBackend:
    """The registry's builder (`model.backend=vllm`) from a `zcp.config.model.ModelConfig`."""
    return VLLMBackend.from_pretrained(str(cfg.path), adapter=cfg.adapter, dtype=cfg.dtype,
                                       trust_remote_code=cfg.trust_remote_code, settings=cfg.vllm,
                                       max_length=cfg.max_length, chat_template_kwargs=cfg.chat_template_kwargs,
                                       chat=cfg.chat, progress=progress)
