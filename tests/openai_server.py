"""A small OpenAI-compatible HTTP server over a transformers model, for the API backend's default tests.

It speaks the parts of the protocol zcp uses, as vLLM's server does: POST /v1/chat/completions (the
chat template rendered here with the body's `chat_template_kwargs`), POST /v1/completions with a text or
token-id prompt, `echo` + `logprobs` (the prompt tokens' log-probs, the first one null), `stop`,
`max_tokens`, greedy decoding at temperature 0. It listens on 127.0.0.1 only, checks the bearer key, and
can be told to fail the next requests with given statuses (429, 500) or to return no log-probs, so the
tests cover retries and the "only acc/con" path. `vllm serve` in the opt-in suite is the real check.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch


class FakeOpenAIServer:
    """Serve `model`/`tokenizer` on 127.0.0.1:<free port> in a thread; use as a context manager."""

    def __init__(self, model: Any, tokenizer: Any, *, api_key: str | None = None, served_name: str = "tiny",
                 logprobs: bool = True) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.api_key = api_key
        self.served_name = served_name
        self.logprobs = logprobs
        self.fail_next: list[int] = []  # statuses returned (in order) before requests are served again
        self.die_after: int | None = None  # after this many served requests, answer 500 to all (a dying server)
        self.requests: list[dict[str, Any]] = []  # bodies of the requests served (not the failed ones)
        self.attempts = 0
        self.auth_headers: list[str] = []
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                status, payload = server.handle(self.path, body, self.headers.get("Authorization") or "")
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("retry-after-ms", "20")
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    # ------------------------------------------------------------------ protocol
    def handle(self, path: str, body: dict[str, Any], auth: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.attempts += 1
            self.auth_headers.append(auth)
            if self.api_key is not None and auth != f"Bearer {self.api_key}":
                return 401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}}
            if self.fail_next:
                status = self.fail_next.pop(0)
                return status, {"error": {"message": f"injected {status}", "type": "server_error"}}
            if self.die_after is not None and len(self.requests) >= self.die_after:
                return 500, {"error": {"message": "server going down", "type": "server_error"}}
            self.requests.append(body)
        with self._model_lock:
            if path.endswith("/chat/completions"):
                return 200, self._chat(body)
            if path.endswith("/completions"):
                return 200, self._completions(body)
        return 404, {"error": {"message": f"no route {path}"}}

    def _generate(self, ids: list[int], body: dict[str, Any]) -> tuple[list[int], str]:
        max_new = int(body.get("max_tokens") or 16)
        with torch.inference_mode():
            out = self.model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                      max_new_tokens=max_new, do_sample=False, temperature=None, top_p=None, top_k=None,
                                      pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.tokenizer.eos_token_id)
        new = out[0, len(ids):].tolist()
        if self.tokenizer.eos_token_id in new:
            new = new[: new.index(self.tokenizer.eos_token_id)]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        cut = min((text.find(s) for s in stops if s in text), default=-1)
        return new, text[:cut] if cut >= 0 else text

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        text = self.tokenizer.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True,
                                                  **(body.get("chat_template_kwargs") or {}))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        _, out = self._generate(ids, body)
        return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                "model": self.served_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": out}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}}

    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        ids = list(prompt) if isinstance(prompt, list) else self.tokenizer(prompt)["input_ids"]
        new, text = self._generate(ids, body)
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        if body.get("echo") and body.get("logprobs") is not None and self.logprobs:
            with torch.inference_mode():
                logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
            lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
            toks = self.tokenizer.convert_ids_to_tokens(ids)
            choice["text"] = self.tokenizer.decode(ids) + text
            choice["logprobs"] = {"tokens": toks, "token_logprobs": [None, *lp], "top_logprobs": None,
                                  "text_offset": [0] * len(toks)}
        return {"id": "cmpl-test", "object": "text_completion", "created": int(time.time()), "model": self.served_name,
                "choices": [choice],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(new), "total_tokens": len(ids) + len(new)}}
