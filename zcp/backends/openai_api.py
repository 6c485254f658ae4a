"""OpenAI-compatible API backend (`model.backend=openai`): the official `openai` client against any server
that speaks the protocol (OpenAI, `vllm serve`, ...).

Two endpoints:
- `chat` (/v1/chat/completions): the server renders the chat template; the assistant turn cannot be
  pre-filled, so the probe runs its instruction variant (`probe.mode=api`, acc/con only).
  `chat_template_kwargs` travel in the request body (vLLM's server applies them, e.g. Qwen3's
  `enable_thinking=false`); nothing is sent when they are empty.
- `completions` (/v1/completions) with `api.tokenizer` (the served model's tokenizer, local): prompts are
  rendered and tokenised here exactly as the transformers and vLLM engines do (`TokenizedBackend`) and
  sent as token ids, so the pre-filled zero-CoT probe runs as for open weights, and p_first/p_all come
  from the prompt log-probs the server returns with `echo=true, logprobs=0` (vLLM's server does). A server
  that returns none is detected with one request before the run, and the run is refused with a message
  that only acc/con are available.

Requests run `api.concurrency` at a time; 429/5xx/connection errors are retried by the client with
exponential backoff (`api.max_retries`), each request with `api.timeout`. Every response is cached on
disk under `api.cache_dir` by the hash of the request (server, model, body), written atomically when it
arrives, so a killed run resumes without paying for a request twice. The key is read from the
environment variable named by `api.api_key_env`, only here, and never written anywhere.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from zcp.backends.base import GenerationRequest, Prompt, ScoreRequest, ScoreResult
from zcp.backends.tokenized import TokenizedBackend, postprocess
from zcp.core.io import stable_hash, write_json
from zcp.errors import ConfigError

log = logging.getLogger(__name__)


class OpenAIBackend(TokenizedBackend):
    """An OpenAI-compatible server behind the `Backend` interface (see the module docstring)."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 endpoint: str = "chat", tokenizer: Any = None, logprobs: str = "auto", concurrency: int = 8,
                 max_retries: int = 6, timeout: float = 120.0, cache_dir: str | os.PathLike[str] | None = None,
                 seed: int | None = 0, chat_template_kwargs: dict[str, Any] | None = None, chat: bool = True,
                 max_length: int | None = None) -> None:
        import openai

        if endpoint not in ("chat", "completions"):
            raise ConfigError(f"model.api.endpoint={endpoint!r}: must be chat or completions")
        if endpoint == "completions" and tokenizer is None:
            raise ConfigError("model.api.endpoint=completions needs model.api.tokenizer (a local tokenizer folder "
                              "of the served model): prompts are sent as token ids")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = os.environ.get(api_key_env)
        if not key:
            if not self.base_url:
                raise ConfigError(f"model.backend=openai: no API key in the environment variable {api_key_env} "
                                  "(the key is read from the environment only, never from a config)")
            key = "EMPTY"  # a local server started without --api-key accepts any key
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=max_retries, timeout=timeout)
        self.model = model
        self.endpoint = endpoint
        self.concurrency = concurrency
        self.seed = seed
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.logprobs_mode = logprobs
        self.name = model
        self.fingerprint = f"openai:{self.base_url or 'api.openai.com'}:{model}:{endpoint}"
        self.logprobs_unavailable: str | None = None
        self._logprobs_checked = False
        self.requests_sent = 0  # requests that reached the server (cache misses), for reports and tests
        if tokenizer is not None:
            self._init_tokenizer(tokenizer, chat_template_kwargs=chat_template_kwargs, chat=chat, max_length=max_length)
        else:
            self.tokenizer = None
            self.chat_template_kwargs = dict(chat_template_kwargs or {})
            self.chat = chat
            self.max_length = max_length
        self.supports_prefill = endpoint == "completions"
        if logprobs == "none" or endpoint == "chat":
            self.logprobs_unavailable = ("model.api.endpoint=chat returns no prompt log-probs (use endpoint=completions "
                                         "with api.tokenizer on a server with echo+logprobs, e.g. vLLM's)"
                                         if endpoint == "chat" else "model.api.logprobs=none")
            self._logprobs_checked = True

    # ------------------------------------------------------------------ capabilities
    @property
    def supports_logprobs(self) -> bool:  # type: ignore[override]
        """Whether the server returns prompt token log-probs; checked once with a one-token request (cached)."""
        if not self._logprobs_checked:
            self._logprobs_checked = True
            if self.logprobs_mode == "auto":
                ids = self.encode_prompts([Prompt(user="1+1=", assistant_prefix="2", chat=False)])[0]
                resp = self._call("completions", self._echo_body(ids))
                lps = ((resp.get("choices") or [{}])[0].get("logprobs") or {}).get("token_logprobs")
                if not lps or len(lps) < len(ids) or any(x is None for x in lps[1:len(ids)]):
                    self.logprobs_unavailable = (f"the server at {self.base_url} returned no prompt log-probs for "
                                                 "echo=true, logprobs=0")
        return self.logprobs_unavailable is None

    def model_positions(self) -> int | None:
        """Unknown for a served model: `model.max_length` states it."""
        return None

    @property
    def context_length(self) -> int | None:
        """`model.max_length` when a local tokenizer can count tokens, else None (no overflow check)."""
        return self.max_length if self.tokenizer is not None else None

    def rendering(self) -> dict[str, Any]:
        """How prompts become text: the server's chat template (endpoint chat), else the local tokenizer's."""
        if self.endpoint == "chat" or self.tokenizer is None:
            return {"kind": "server", "endpoint": self.endpoint,
                    "chat_template_kwargs": dict(self.chat_template_kwargs)}
        return super().rendering()

    def render(self, prompt: Prompt) -> str:
        """The rendered prompt (local chat template) or, without a local tokenizer, the messages as JSON."""
        if self.tokenizer is not None:
            return super().render(prompt)
        return json.dumps(self._messages(prompt), ensure_ascii=False)

    # ------------------------------------------------------------------ requests
    def _messages(self, prompt: Prompt) -> list[dict[str, str]]:
        if not prompt.chat:
            raise ValueError("model.api.endpoint=chat cannot send a raw (chat=False) prompt; use endpoint=completions")
        if prompt.assistant_prefix:
            raise ValueError("model.api.endpoint=chat cannot pre-fill the assistant turn; run probe.mode=api")
        return ([{"role": "system", "content": prompt.system}] if prompt.system else []) + [
            {"role": "user", "content": prompt.user}]

    def _echo_body(self, ids: Sequence[int]) -> dict[str, Any]:
        return {"model": self.model, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0, "echo": True,
                "logprobs": 0, **({"seed": self.seed} if self.seed is not None else {})}

    def _cache_path(self, kind: str, body: dict[str, Any]) -> Path | None:
        if self.cache_dir is None:
            return None
        key = stable_hash(json.dumps({"server": self.base_url, "kind": kind, "body": body}, sort_keys=True), 40)
        return self.cache_dir / key[:2] / f"{key}.json"

    def _call(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request (from the cache when it was answered before); the response as a dict."""
        path = self._cache_path(kind, body)
        if path is not None and path.exists():
            try:
                return json.loads(path.read_text())["response"]
            except (ValueError, KeyError):
                log.warning("unreadable cache entry %s: asking again", path)
        api = self._client.chat.completions if kind == "chat" else self._client.completions
        known = {"model", "messages", "prompt", "max_tokens", "temperature", "stop", "seed", "echo", "logprobs"}
        extra = {k: v for k, v in body.items() if k not in known}
        import openai

        try:
            resp = api.create(**{k: v for k, v in body.items() if k in known},
                              **({"extra_body": extra} if extra else {}))
        except openai.APIConnectionError as e:  # no server there (refused, unreachable, timed out), after retries
            # one line naming the URL and what failed; never the key (in no message of this module)
            url = self.base_url or "https://api.openai.com/v1"
            what = "timed out" if isinstance(e, openai.APITimeoutError) else "could not connect"
            raise ConfigError(f"model.api.base_url={url}: no OpenAI-compatible server answers ({what} after "
                              f"{self._client.max_retries} retries, model.api.max_retries); start the server or "
                              "fix model.api.base_url (requests already answered are cached: a rerun resumes)"
                              ) from None
        self.requests_sent += 1
        out = resp.model_dump() if hasattr(resp, "model_dump") else dict(resp)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, {"request": {"kind": kind, **body}, "response": out})
        return out

    def _map(self, kind: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(bodies) <= 1 or self.concurrency <= 1:
            return [self._call(kind, b) for b in bodies]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda b: self._call(kind, b), bodies))

    # ------------------------------------------------------------------ Backend
    def score(self, requests: Sequence[ScoreRequest]) -> list[ScoreResult]:
        """Teacher-forced log-probs of each continuation: the prompt log-probs the server echoes for the same
        token ids the open-weights engines score (`encode_for_scoring`)."""
        if not requests:
            return []
        if any(r.distribution_stats for r in requests):
            raise NotImplementedError("model.backend=openai: distribution_stats (Min-K%++) needs the whole next-token "
                                      "distribution, which an API does not return; use backend=hf or vllm")
        if not self.supports_prefill or not self.supports_logprobs:
            raise ValueError(f"p_first/p_all unavailable: {self.logprobs_unavailable or 'no pre-fill'}; "
                             "only acc/con are available (probe.metrics=[acc,con])")
        enc = self.encode_for_scoring(requests)
        resps = self._map("completions", [self._echo_body(e.ids) for e in enc])
        out = []
        for i, (e, resp) in enumerate(zip(enc, resps, strict=True)):
            lp = (resp["choices"][0].get("logprobs") or {}).get("token_logprobs") or []
            got = lp[e.start:e.end]
            if len(got) != len(e.continuation_ids) or any(x is None for x in got):
                raise ValueError(f"score request {i}: the server returned {len(lp)} prompt log-probs for a prompt of "
                                 f"{e.end} tokens; only acc/con are available from it")
            out.append(ScoreResult(token_logprobs=tuple(float(x) for x in got),
                                   tokens=tuple(self.tokenizer.convert_ids_to_tokens(list(e.continuation_ids)))))
        return out

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Generated text; the same stop rules as the other engines (box closed, stop strings, budget)."""
        if not requests:
            return []
        bodies = []
        kind = self.endpoint
        ids = self.encode_prompts([r.prompt for r in requests]) if kind == "completions" else None
        for i, r in enumerate(requests):
            body: dict[str, Any] = {"model": self.model, "max_tokens": r.max_new_tokens, "temperature": r.temperature}
            if kind == "chat":
                body["messages"] = self._messages(r.prompt)
                if self.chat_template_kwargs:
                    body["chat_template_kwargs"] = self.chat_template_kwargs
            else:
                body["prompt"] = ids[i]  # type: ignore[index]
            if r.stop:
                body["stop"] = list(r.stop)[:4]
            seed = r.seed if r.seed is not None else self.seed
            if seed is not None:
                body["seed"] = seed
            bodies.append(body)
        resps = self._map(kind, bodies)
        out = []
        for r, resp in zip(requests, resps, strict=True):
            ch = resp["choices"][0]
            text = (ch.get("message") or {}).get("content") if kind == "chat" else ch.get("text")
            out.append(postprocess(text or "", r.stop_at_box_close, r.stop))
        return out


def from_config(cfg: Any, progress: bool = False) -> OpenAIBackend:
    """The registry's builder (`model.backend=openai`) from a `zcp.config.model.ModelConfig`."""
    api = cfg.api
    tok = None
    if api.tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(api.tokenizer), trust_remote_code=cfg.trust_remote_code)
    return OpenAIBackend(str(api.model or cfg.path), base_url=api.base_url, api_key_env=api.api_key_env,
                         endpoint=api.endpoint, tokenizer=tok, logprobs=api.logprobs, concurrency=api.concurrency,
                         max_retries=api.max_retries, timeout=api.timeout, cache_dir=api.cache_dir, seed=api.seed,
                         chat_template_kwargs=cfg.chat_template_kwargs, chat=cfg.chat, max_length=cfg.max_length)
