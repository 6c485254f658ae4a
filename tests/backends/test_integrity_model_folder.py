"""A model folder whose config.json does not describe its weights is one line naming the folder, config.json and a
tensor whose shapes differ (exit 2 at an entry point), before a weight is read; transformers alone raises a
RuntimeError after a many-line load report. The DiD's base model is checked the same way before the audited model
loads, and a base model that would be rendered without the audited model's chat template is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from configs import compose

from zcp.benchmarks.loaders import save_items
from zcp.core.items import Item
from zcp.errors import ConfigError

Q = "Ann has {a} pens and gets {b} more. How many pens?"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_tok) -> Path:
    from zcp.core.testing import tiny_llama

    root = tmp_path_factory.mktemp("folder_model") / "model"
    tiny_llama(tiny_tok, hidden=32, layers=2, heads=2).save_pretrained(root)
    tiny_tok.save_pretrained(root)
    return root


def _edit_config(folder: Path, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def mismatched(model_dir, tmp_path) -> Path:
    bad = tmp_path / "bad"
    shutil.copytree(model_dir, bad)
    _edit_config(bad, hidden_size=64)  # the weights were saved at 32
    return bad


def _data(tmp_path: Path) -> list[str]:
    items = [Item(f"q{i}", Q.format(a=i + 10, b=3), str(i + 13)) for i in range(4)]
    refs = [Item(f"q{i}::r0", Q.format(a=i + 40, b=3), str(i + 43), metadata={"original_id": f"q{i}"})
            for i in range(4)]
    save_items(tmp_path / "bench.jsonl", items)
    save_items(tmp_path / "ref.jsonl", refs)
    return [f"data.path={tmp_path / 'bench.jsonl'}", f"data.reference_path={tmp_path / 'ref.jsonl'}",
            "data.format=items", "data.name=bench", "logger=none", "run.progress=false",
            "probe.metrics=[p_first,p_all]", "stats.bootstrap_samples=50", f"output_dir={tmp_path / 'run'}"]


def _detect(*overrides: str):
    from zcp.probe.run import run_detect

    return run_detect(compose("detect", *overrides))


def test_a_config_that_does_not_match_the_weights_is_one_line_before_they_load(mismatched):
    from zcp.backends.hf import HFBackend

    with pytest.raises(ConfigError) as e:
        HFBackend.from_pretrained(mismatched)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{mismatched}: config.json does not match the weights (")
    assert "model.embed_tokens.weight: weights [" in msg and ", 32], config [" in msg and ", 64]" in msg


def test_the_same_folder_loads(model_dir):
    from zcp.backends.hf import HFBackend, check_weights_fit_config

    check_weights_fit_config(model_dir)  # nothing to say about a folder saved as one
    assert HFBackend.from_pretrained(model_dir).model.config.hidden_size == 32


def test_a_config_transformers_cannot_build_is_one_line(model_dir, tmp_path):
    from zcp.backends.hf import check_weights_fit_config

    bad = tmp_path / "bad"
    shutil.copytree(model_dir, bad)
    _edit_config(bad, model_type="no_such_architecture")
    with pytest.raises(ConfigError) as e:
        check_weights_fit_config(bad)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{bad}: config.json does not describe a causal LM")


def test_run_detect_on_it_is_one_line_exit_2_and_leaves_no_directory(mismatched, tmp_path, capsys):
    from zcp.config import one_line_errors

    def entry_point() -> None:
        _detect(f"model.path={mismatched}", *_data(tmp_path))

    with pytest.raises(SystemExit) as e:
        one_line_errors(entry_point)()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert e.value.code == 2 and len(err) == 1 and "config.json does not match the weights" in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.xfail(strict=True, reason="the DiD's pre-load checks (zcp.config.model.check_model_files, called by "
                                       "zcp.probe.did.base_model_config) read config.json, weights and tokenizer "
                                       "files but not whether the config fits the weights: the base model's "
                                       "mismatch is met when it loads, after the audited model was probed")
def test_a_base_model_whose_config_does_not_match_its_weights_is_refused_before_the_audited_model_loads(
        model_dir, mismatched, tmp_path, no_load):
    with pytest.raises(ConfigError, match=r"config\.json does not match the weights"):
        _detect(f"model.path={model_dir}", f"base_model.path={mismatched}", *_data(tmp_path))
    assert not no_load


def test_a_base_model_rendered_without_the_chat_template_is_refused_before_any_load(model_dir, tmp_path, no_load):
    """The audited model gets its chat template; a base folder without one would be rendered with the plain
    template: another prompt for every unit, so no DiD 'on the same units'."""
    if not json.loads((model_dir / "tokenizer_config.json").read_text()).get("chat_template") and not (
            model_dir / "chat_template.jinja").exists():
        pytest.skip("the test tokenizer has no chat template")
    base = tmp_path / "base"
    shutil.copytree(model_dir, base)
    (base / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as e:
        _detect(f"model.path={model_dir}", f"base_model.path={base}", *_data(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and "(chat template)" in msg and "model.chat=false" in msg
    assert not no_load


def test_the_troubleshooting_guide_quotes_the_message(mismatched):
    from zcp.backends.hf import check_weights_fit_config

    doc = (Path(__file__).resolve().parents[2] / "docs" / "detect.md").read_text()
    section = " ".join(doc[doc.index("## Troubleshooting"):].split())
    with pytest.raises(ConfigError) as e:
        check_weights_fit_config(mismatched)
    for part in (": config.json does not match the weights (model.embed_tokens.weight: weights [",
                 "more tensors differ): use the config.json saved with these weights",
                 "config.json does not describe a causal LM transformers can build ("):
        assert part in section, part
    assert all(p in str(e.value) for p in ("more tensors differ): use the config.json saved with these weights",
                                           ": config.json does not match the weights (model.embed_tokens.weight"))
