"""An OpenAI-compatible server that is not there: after its retries, one line naming the URL (never the key)."""

from __future__ import annotations

import socket

import pytest

from zcp.backends.base import GenerationRequest, Prompt
from zcp.errors import ConfigError

openai = pytest.importorskip("openai")

SECRET = "sk-zcp-test-dead-0a1b2c3d-SECRET"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_is_one_line_naming_the_url_not_the_key(monkeypatch, tmp_path):
    from zcp.backends.openai_api import OpenAIBackend

    monkeypatch.setenv("ZCP_TEST_API_KEY", SECRET)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    api = OpenAIBackend("tiny", base_url=url, api_key_env="ZCP_TEST_API_KEY", endpoint="chat", max_retries=1,
                        timeout=2, cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError) as e:
        api.generate([GenerationRequest(Prompt("What is 1+1?"), max_new_tokens=4)])
    msg = str(e.value)
    assert "\n" not in msg and url in msg and SECRET not in msg
    assert "model.api.base_url" in msg and "after 1 retries" in msg
    assert not any((tmp_path / "cache").rglob("*.json"))  # nothing cached for an unanswered request
