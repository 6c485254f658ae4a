"""A multi-convention run over another configuration's finished run, with the lists of the reproductions (every
list, not only one): `[hash,sentence]` and `[probe,hash]` over a default run and over a three-convention run are
refused before any model loads, and nothing in the directory changes (records, summary, table, run_meta, config
and the conv-*/ folders). And `probe.prefill=auto` that read none of a set's full-CoT outputs (every prompt too long
for the context) says so in table.md, naming the full-CoT budget that fits, beside what it chose."""

from __future__ import annotations

from pathlib import Path

import pytest
from detect_world import Q, build_world, detect_cfg
from fakes import FakeBackend

from zcp.errors import RunDirError


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_tok, tiny_model) -> Path:
    return build_world(tmp_path_factory.mktemp("multiconv_dirs"), tiny_tok, tiny_model)


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("first", [(), ("probe.prefill=[probe,hash,sentence]",)], ids=["default", "three"])
@pytest.mark.parametrize("second", ["[hash,sentence]", "[probe,hash]"])
def test_a_multi_convention_run_over_another_finished_run_is_refused_and_changes_nothing(world, tmp_path,
                                                                                          monkeypatch, first, second):
    import zcp.backends.registry
    from zcp.probe.run import run_detect

    out = tmp_path / "run"
    monkeypatch.setattr(zcp.backends.registry, "build_backend", lambda *a, **k: FakeBackend({Q.format(a=10, b=3): "13"}))
    run_detect(detect_cfg(world, out, *first))
    before = _snapshot(out)
    assert "records.jsonl" in before or "conv-probe/records.jsonl" in before

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the directory was refused")

    monkeypatch.setattr(zcp.backends.registry, "build_backend", refuse)
    with pytest.raises(RunDirError) as e:
        run_detect(detect_cfg(world, out, f"probe.prefill={second}"))
    msg = str(e.value)
    assert "\n" not in msg and "another configuration (fingerprint" in msg and "probe.prefill" in msg, msg
    assert _snapshot(out) == before


def test_auto_that_read_no_output_says_so_in_table_md_naming_the_budget_that_fits(tmp_path):
    from conv_fakes import ConventionBackend, toy_datasets

    from zcp.probe.detect import DetectSettings
    from zcp.probe.multiconv import detect_prefill
    from zcp.probe.probe_config import AutoPrefillConfig
    from zcp.probe.prompts import ProbeConfig

    datasets, memorised, truth = toy_datasets()

    class Counting(ConventionBackend):  # a token per character; C's and U's questions fit only a short budget
        context_length = 600

        def count_tokens(self, prompts, texts=()):
            return [len(p.user) for p in prompts], [len(t) for t in texts]

    fb = Counting(memorised, truth=truth)
    summary = detect_prefill(fb, datasets, ProbeConfig(metrics=("p_all",), full_cot_max_tokens=590), tmp_path,
                             DetectSettings(progress=False), prefill="auto", auto=AutoPrefillConfig(neutral_n=4))
    table = (tmp_path / "table.md").read_text()
    c = summary["auto"]["sets"]["C"]
    assert (c["n"], c["read"], c["too_long"]) == (12, 0, 12)
    c_set = datasets[0]
    longest = max(len(it.question) for it in [*c_set.originals, *(r for rows in c_set.reference.values() for r in rows)])
    line = ("**Warning**: auto read 0 of 12 full-CoT outputs on C (12 too long for the model's context at "
            f"probe.full_cot_max_tokens=590; every prompt fits at probe.full_cot_max_tokens={600 - longest}): its "
            "reading rests on few outputs.")
    assert line in table.splitlines(), table
    assert table.index("Chosen: ") < table.index(line)  # beside what auto chose from nothing
