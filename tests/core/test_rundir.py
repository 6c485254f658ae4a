"""zcp.core.rundir: a contamination run dir read one way (ContaminationRun), the finished-detection rule."""

import json
import os

import pytest

from zcp.core.rundir import (
    BENCHMARK_ITEMS,
    DETECTION_META,
    DETECTION_RECORDS,
    DETECTION_SUMMARY,
    EXPOSURE,
    MANIFEST,
    MODEL,
    RUN_CONFIG,
    RUN_DIR_SCHEMA,
    RUN_FINGERPRINT,
    ContaminationRun,
    claim_run_dir,
    detection_unfinished,
    detection_unit,
    fingerprint_of,
)
from zcp.errors import ConfigError, RunDirError


def _units(n):
    return [{"split": "C", "variant": v, "original_id": f"i{k}", "draw": 0, "acc": 1.0}
            for k in range(n) for v in ("original", "reference")]


def _detection(d, n=3, cut=None, summary=True, torn=False, t=None):
    """A detection run dir of n items (2 units each); `cut` keeps that many records, `torn` adds half a line."""
    d.mkdir(parents=True)
    recs = _units(n)[:cut]
    text = "".join(json.dumps(r) + "\n" for r in recs) + ('{"split": "C", "vari' if torn else "")
    (d / DETECTION_RECORDS).write_text(text)
    (d / DETECTION_META).write_text(json.dumps({"fingerprint": "x", "n_units": 2 * n}))
    if summary:
        (d / DETECTION_SUMMARY).write_text(json.dumps({"results": []}))
    if t is not None:
        for name in (DETECTION_RECORDS, DETECTION_SUMMARY):
            if (d / name).exists():
                os.utime(d / name, (t, t))
    return d


def _run(tmp_path, **files):
    run = tmp_path / "run"
    run.mkdir()
    for name, content in files.items():
        (run / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return run


def test_a_finished_detection_says_nothing(tmp_path):
    assert detection_unfinished(_detection(tmp_path / "FT__a")) is None
    assert detection_unit(_units(1)[1]) == ("C", "reference", "i0", 0)


@pytest.mark.parametrize(("kw", "says"), [
    ({"cut": 4}, "records.jsonl holds 4 of the 6 units run_meta.json announces"),
    ({"summary": False}, "no summary.json"),
    ({"cut": 5, "summary": False}, "no summary.json, records.jsonl holds 5 of the 6 units run_meta.json announces"),
    ({"cut": 5, "torn": True}, "holds 5 of the 6 units"),  # a torn last line is not a record
])
def test_an_unfinished_detection_is_named_with_what_is_missing(tmp_path, kw, says):
    d = _detection(tmp_path / "FT__a", **kw)
    reason = detection_unfinished(d)
    assert reason is not None and str(d) in reason and "is not finished" in reason and says in reason
    assert "\n" not in reason


def test_a_detection_without_records_or_meta_or_a_dir(tmp_path):
    assert "no such directory" in detection_unfinished(tmp_path / "nowhere")
    d = _detection(tmp_path / "FT__a")
    (d / DETECTION_META).unlink()
    assert "no run_meta.json" in detection_unfinished(d)
    (d / DETECTION_META).write_text('{"n_units": ')
    assert "truncated or not valid JSON" in detection_unfinished(d)
    (d / DETECTION_META).write_text(json.dumps({"fingerprint": "x"}))
    assert "announces no n_units" in detection_unfinished(d)


def test_the_newest_finished_detection_is_chosen_and_newer_unfinished_ones_named(tmp_path):
    run = ContaminationRun(tmp_path / "run")
    assert run.newest_detection() == (None, [])
    old = _detection(run.detect_dir / "FT__old", t=1_000_000)
    mid = _detection(run.detect_dir / "FT__mid", t=2_000_000)
    new = _detection(run.detect_dir / "FT__new", cut=2, t=3_000_000)
    _detection(run.detect_dir / "base__x", t=4_000_000)  # not the fine-tuned model's
    (run.detect_dir / "FT__empty").mkdir()  # no records at all: not a detection
    found, passed = run.newest_detection()
    assert found == mid and len(passed) == 1 and str(new) in passed[0] and "holds 2 of the 6" in passed[0]
    (mid / DETECTION_SUMMARY).unlink()  # newest by its records' time still, now unfinished
    found, passed = run.newest_detection()
    assert found == old and [str(new) in passed[0], str(mid) in passed[1]] == [True, True]
    (old / DETECTION_RECORDS).write_text("")
    assert run.newest_detection()[0] is None and len(run.newest_detection()[1]) == 3


def test_require_names_the_dir_and_the_first_missing_file(tmp_path):
    run_dir = _run(tmp_path, **{MANIFEST: {"c_ids": []}, BENCHMARK_ITEMS: ""})
    run = ContaminationRun(run_dir)
    assert run.require(MANIFEST, BENCHMARK_ITEMS) is run and run.has(MANIFEST) and not run.has(MANIFEST, MODEL)
    with pytest.raises(ConfigError) as e:
        run.require(MANIFEST, EXPOSURE, MODEL)
    assert str(e.value) == f"run_dir={run_dir}: no {EXPOSURE} there (not a finished contamination run directory)"
    with pytest.raises(ConfigError, match=r"^ablation\.run_dir=.*no model there"):
        ContaminationRun(run_dir, key="ablation.run_dir").require(MODEL)
    assert run.missing(MODEL, EXPOSURE, MANIFEST) == [MODEL, EXPOSURE]


def test_paths_and_records(tmp_path):
    cfg = {"seed": 3, "detect": {"m": 2}}
    run_dir = _run(tmp_path, **{RUN_CONFIG: {"fingerprint": {}, "config": cfg},
                                EXPOSURE: {"knobs": {"k": 1}, "base_model": "/m"}})
    (run_dir / "detect").mkdir()
    (run_dir / "detect" / "simulation_summary.json").write_text(json.dumps({"results": {"FT": []}}))
    run = ContaminationRun(str(run_dir))
    assert run.name == "run" and run.model_path == run_dir / MODEL and run.items_path == run_dir / BENCHMARK_ITEMS
    assert run.manifest_path == run_dir / MANIFEST and run.config_path == run_dir / RUN_CONFIG
    assert run.baselines_summary_path == run_dir / "baselines" / "summary.json"
    assert run.config == cfg and run.exposure["base_model"] == "/m" and run.simulation_summary == {"results": {"FT": []}}
    (run_dir / RUN_CONFIG).write_text(json.dumps({"fingerprint": {}}))
    assert ContaminationRun(run_dir).config == {}  # a run config without its config section


def test_a_missing_or_cut_record_is_one_line(tmp_path):
    run_dir = _run(tmp_path, **{EXPOSURE: '{"knobs": '})
    run = ContaminationRun(run_dir)
    with pytest.raises(RunDirError, match=r"exposure\.json is truncated"):
        _ = run.exposure
    with pytest.raises(ConfigError, match=r"no run_config\.json there"):
        _ = run.config
    with pytest.raises(ConfigError, match=r"no detect/simulation_summary\.json there"):
        _ = run.simulation_summary


def test_the_writers_and_readers_name_the_files_by_the_shared_constants():
    """No module that writes or reads a contamination run dir (zcp.simulate, zcp.probe, zcp.validate, the scripts
    and entry points) joins a path with one of its file names spelt out: they import zcp.core.rundir's."""
    from pathlib import Path

    import zcp

    repo = Path(zcp.__file__).parent.parent
    names = ["run_config.json", "manifest.json", "benchmark_items.jsonl", "exposure.json", "simulation_summary.json",
             "model"]
    dirs = ["zcp/simulate", "zcp/probe", "zcp/validate", "scripts", "evaluate", "train"]
    offenders = []
    for p in sorted(f for d in dirs for f in (repo / d).rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        offenders += [f"{p.relative_to(repo)}: / {q}{n}{q}" for n in names for q in "\"'" if f"/ {q}{n}{q}" in text]
    assert not offenders, offenders


def test_a_claim_resumes_its_own_run_and_refuses_any_other_in_one_line(tmp_path):
    """The one run-dir rule: a new directory is stamped (schema, job, fingerprint, made_of); the same job and
    fingerprint resumes; another fingerprint, another job, another (or no) schema and unstamped products are each
    refused in one line naming both fingerprints and what to do, leaving the stamp as it was."""
    d = tmp_path / "run"
    made_of = {"config": {"seed": 0, "m": 2}, "weights": {"model": "abc"}}
    fp = fingerprint_of(made_of)
    assert claim_run_dir(d, "detect", made_of) is False
    stamp = json.loads((d / RUN_FINGERPRINT).read_text())
    assert stamp == {"schema": RUN_DIR_SCHEMA, "job": "detect", "fingerprint": fp, "made_of": made_of}
    assert claim_run_dir(d, "detect", made_of) is True
    other = {"config": {"seed": 1, "m": 2}, "weights": {"model": "abc"}}
    refusals = [
        (lambda: claim_run_dir(d, "detect", other),
         rf"holds a detect run of another configuration \(fingerprint {fp}; this detect run: "
         rf"{fingerprint_of(other)}; differing: config\.seed\); use another output_dir, or delete"),
        (lambda: claim_run_dir(d, "baselines", made_of, key="run_dir"),
         rf"run_dir={d} holds a detect run of another configuration \(fingerprint {fp}; this baselines run: {fp}; "
         r"differing: job\)"),
    ]
    for call, says in refusals:
        with pytest.raises(RunDirError, match=says) as e:
            call()
        assert "\n" not in str(e.value)
    for schema in (None, RUN_DIR_SCHEMA + 1):
        old = {k: v for k, v in stamp.items() if k != "schema"} | ({"schema": schema} if schema else {})
        (d / RUN_FINGERPRINT).write_text(json.dumps(old))
        with pytest.raises(RunDirError, match=rf"holds a detect run \(fingerprint {fp}\) of run-dir schema {schema}, "
                                              rf"not {RUN_DIR_SCHEMA} \(this detect run: {fp}\): made by another "
                                              "version of zcp; use another output_dir, or delete"):
            claim_run_dir(d, "detect", made_of)
        assert json.loads((d / RUN_FINGERPRINT).read_text()) == old
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "records.jsonl").write_text("{}\n")
    with pytest.raises(RunDirError, match=rf"holds records\.jsonl but no {RUN_FINGERPRINT} \(a run of unknown "
                                          rf"configuration; this detect run: fingerprint {fp}\)"):
        claim_run_dir(bare, "detect", made_of, products=("records.jsonl",))
    assert not (bare / RUN_FINGERPRINT).exists()


def test_the_sweep_collector_keeps_finished_runs_only_and_says_why_of_the_others(tmp_path):
    """One "finished" rule: run_config.json, exposure.json and detect/simulation_summary.json, and
    baselines/summary.json when the run's stages list baselines; runs given and found by pattern, each once."""
    from zcp.core.rundir import run_unfinished, sweep_runs

    def sim(name, stages, *files):
        d = tmp_path / name
        (d / "detect").mkdir(parents=True)
        (d / RUN_CONFIG).write_text(json.dumps({"config": {"stages": stages}}))
        for f in files:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_text("{}")
        return d

    done = sim("exp__a", ["contaminate", "detect"], EXPOSURE, "detect/simulation_summary.json")
    with_b = sim("exp__b", ["contaminate", "detect", "baselines"], EXPOSURE, "detect/simulation_summary.json",
                 "baselines/summary.json")
    no_b = sim("exp__c", ["contaminate", "detect", "baselines"], EXPOSURE, "detect/simulation_summary.json")
    killed = sim("exp__d", ["contaminate", "detect"], EXPOSURE)
    (tmp_path / "exp__e").mkdir()
    (tmp_path / "other__f").mkdir()
    assert run_unfinished(done) is None and run_unfinished(with_b) is None
    assert run_unfinished(no_b) == "no baselines/summary.json (its baselines stage has not finished)"
    assert run_unfinished(killed) == "no detect/simulation_summary.json (its detect stage has not finished)"
    assert run_unfinished(tmp_path / "nope") == "no such directory"
    finished, left_out = sweep_runs(tmp_path, "exp__*", runs=[with_b, tmp_path / "nope"])
    assert [r.path for r in finished] == [with_b, done]
    assert left_out == [(tmp_path / "nope", "no such directory"),
                        (no_b, "no baselines/summary.json (its baselines stage has not finished)"),
                        (killed, "no detect/simulation_summary.json (its detect stage has not finished)"),
                        (tmp_path / "exp__e", f"no {RUN_CONFIG} (not a contamination run)")]
