"""What can be checked without a model is checked before the first model loads: both model folders (config.json a
file of valid JSON, weights, tokenizer), output_dir (a file, a symlink loop, a directory another run holds) and,
for a DiD, that the base model's tokenizer is the audited model's (vocabulary, merges, special tokens, chat
template); each refused in one line naming the file and the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from configs import compose

from zcp.benchmarks.loaders import save_items
from zcp.core.io import RunLock
from zcp.core.items import Item
from zcp.errors import ConfigError, RunDirError

Q = "Ann has {a} pens and gets {b} more. How many pens?"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_tok) -> Path:
    from zcp.core.testing import tiny_llama

    root = tmp_path_factory.mktemp("preload_model") / "model"
    tiny_llama(tiny_tok, hidden=32, layers=2, heads=2).save_pretrained(root)
    tiny_tok.save_pretrained(root)
    return root


@pytest.fixture
def data(tmp_path) -> list[str]:
    items = [Item(f"q{i}", Q.format(a=i + 10, b=3), str(i + 13)) for i in range(4)]
    refs = [Item(f"q{i}::r0", Q.format(a=i + 40, b=3), str(i + 43), metadata={"original_id": f"q{i}"})
            for i in range(4)]
    save_items(tmp_path / "bench.jsonl", items)
    save_items(tmp_path / "ref.jsonl", refs)
    return [f"data.path={tmp_path / 'bench.jsonl'}", f"data.reference_path={tmp_path / 'ref.jsonl'}",
            "data.format=items", "data.name=bench", "logger=none", "run.progress=false",
            "probe.metrics=[p_first,p_all]", "stats.bootstrap_samples=100"]


def _detect(*overrides: str):
    from zcp.probe.run import run_detect

    return run_detect(compose("detect", *overrides))


def _copy(model_dir: Path, dest: Path) -> Path:
    shutil.copytree(model_dir, dest)
    return dest


@pytest.mark.parametrize("damage,expect", [
    (lambda d: [p.unlink() for p in d.glob("tokenizer*")] and (d / "special_tokens_map.json").unlink(missing_ok=True),
     "no tokenizer"),
    (lambda d: (d / "config.json").write_text('{"model_type": "llama",'), "config.json is not valid JSON"),
    (lambda d: ((d / "config.json").unlink(), (d / "config.json").mkdir()), "config.json is a directory"),
    (lambda d: [p.unlink() for p in d.glob("*.safetensors")], "no weights"),
])
def test_a_broken_model_folder_is_one_line_before_loading(model_dir, tmp_path, data, no_load, damage, expect):
    bad = _copy(model_dir, tmp_path / "bad")
    damage(bad)
    with pytest.raises(ConfigError) as e:
        _detect(f"model.path={bad}", f"output_dir={tmp_path / 'run'}", *data)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"model.path={bad}:") and expect in msg
    assert not no_load and not (tmp_path / "run").exists()


def test_a_broken_base_model_folder_is_refused_before_the_audited_model_loads(model_dir, tmp_path, data, no_load):
    base = _copy(model_dir, tmp_path / "base")
    for p in base.glob("tokenizer*"):
        p.unlink()
    with pytest.raises(ConfigError) as e:
        _detect(f"model.path={model_dir}", f"base_model.path={base}", f"output_dir={tmp_path / 'run'}", *data)
    assert str(e.value).startswith(f"base_model.path={base}:") and "no tokenizer" in str(e.value)
    assert not no_load


def test_a_base_model_path_that_is_a_file_is_refused_before_any_load(model_dir, tmp_path, data, no_load):
    base = tmp_path / "base.bin"
    base.write_bytes(b"weights?")
    with pytest.raises(ConfigError) as e:
        _detect(f"model.path={model_dir}", f"base_model.path={base}", f"output_dir={tmp_path / 'run'}", *data)
    assert str(e.value).startswith(f"base_model.path={base} is a file, not a model folder")
    assert not no_load


@pytest.mark.parametrize("what,change", [
    ("chat template", lambda d: _edit_json(d / "tokenizer_config.json", chat_template="{{ messages }}")),
    ("vocabulary", lambda d: _edit_json(d / "tokenizer.json", vocab_swap=True)),
    ("special tokens", lambda d: _edit_json(d / "tokenizer_config.json", eos_token="<other>")),
])
def test_a_did_with_another_tokenizer_is_refused_naming_what_differs(model_dir, tmp_path, data, no_load, what,
                                                                     change):
    base = _copy(model_dir, tmp_path / "base")
    change(base)
    with pytest.raises(ConfigError) as e:
        _detect(f"model.path={model_dir}", f"base_model.path={base}", f"output_dir={tmp_path / 'run'}", *data)
    msg = str(e.value)
    assert "\n" not in msg and "base_model.path" in msg and what in msg and "tokenizer" in msg
    assert not no_load


def test_the_same_tokenizer_passes_the_did_check(model_dir, tmp_path):
    from zcp.config.model import tokenizer_differences

    assert tokenizer_differences(model_dir, _copy(model_dir, tmp_path / "same")) == []


def _edit_json(path: Path, vocab_swap: bool = False, **fields) -> None:
    if not path.exists() and fields.get("chat_template"):  # the template saved as its own file
        (path.parent / "chat_template.jinja").write_text(fields["chat_template"])
        return
    d = json.loads(path.read_text())
    if vocab_swap:
        vocab = d["model"]["vocab"]
        (a, ia), (b, ib) = list(vocab.items())[-2:]
        vocab[a], vocab[b] = ib, ia  # the same tokens, other ids
    if "chat_template" in fields and "chat_template" not in d and (path.parent / "chat_template.jinja").exists():
        (path.parent / "chat_template.jinja").write_text(fields.pop("chat_template"))
    d.update(fields)
    path.write_text(json.dumps(d))


def test_output_dir_that_is_a_file_is_refused_before_loading(model_dir, tmp_path, data, no_load):
    f = tmp_path / "run"
    f.write_text("not a dir")
    with pytest.raises(RunDirError, match="is a file, not a directory"):
        _detect(f"model.path={model_dir}", f"output_dir={f}", *data)
    assert not no_load and f.read_text() == "not a dir"


def test_output_dir_in_a_symlink_loop_is_refused_before_loading(model_dir, tmp_path, data, no_load):
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    with pytest.raises(RunDirError, match="symlink loop"):
        _detect(f"model.path={model_dir}", f"output_dir={loop / 'run'}", *data)
    assert not no_load


def test_a_busy_output_dir_is_refused_before_loading(model_dir, tmp_path, data, no_load):
    out = tmp_path / "run"
    with RunLock(out), pytest.raises(RunDirError, match="in use by another run"):
        _detect(f"model.path={model_dir}", f"output_dir={out}", *data)
    assert not no_load
