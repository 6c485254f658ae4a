"""The detector study report renders from small hand-made run dirs, and its tables hold the numbers put in."""

import json

import pytest
from study_runs import _ablations_dir, _baselines_dir, _detection_records, _run_dir  # noqa: F401

from zcp.core.io import write_json
from zcp.validate.study import build_report


def test_report_renders_the_numbers_put_in(tmp_path):
    from zcp.validate.detectors import spec_of

    run = _run_dir(tmp_path, "para")
    conds = {"paraphrased": {"run_dir": str(run), "ablations_dir": str(_ablations_dir(tmp_path)),
                             "baselines_dir": str(_baselines_dir(tmp_path))},
             "verbatim": {"run_dir": None, "ablations_dir": None, "baselines_dir": None}}
    rep = build_report(conds, tmp_path / "out", ["acc", "p_all"])
    md = (tmp_path / "out" / "report.md").read_text()
    assert "verbatim" not in rep["conditions"] and "Verbatim" not in md  # a condition with no runs is left out
    rows = {r["detector"]: r for r in rep["conditions"]["paraphrased"]["detectors"]}
    # ZCP: every C item has a positive gap, every U item none -> AUROC 1, TPR 1; flagged on C, not on U
    assert rows["zcp_p_all"]["auroc"] == 1.0 and rows["zcp_p_all"]["tpr_at_5fpr"] == 1.0
    assert rows["zcp_acc"]["c_decision"] is True and rows["zcp_acc"]["u_decision"] is False
    assert rows["zcp_combined"]["c_decision"] is True and rows["zcp_combined"]["u_decision"] is False
    assert f"| {spec_of('zcp_p_all').label} | 1.000 | 1.000 | flagged" in md
    # baselines: numbers and decisions as given, label from the registry, ZCP rows not duplicated
    assert f"| {spec_of('ppl').label} | 0.654 | 0.123 | flagged (p=0.012) | not flagged (p=0.46) |" in md
    assert "a label the registry overrides" not in md and "0.424" not in md
    assert "skipped: needs a reference set" in md
    # ablations
    assert "| 0.50 | C | P_all | 0.161 | 0.222 | -0.100 | 0.500 |" in md
    assert "| C | Acc | 0.865 | 0.876 | 0.500 | 0.012 | 0.432 | 0.999 |" in md
    assert "0.65 / 0.777 ± 0.044" in md and "20 (all)" in md
    for png in ("auroc.png", "truncation_c_cont.png", "sample_size_paraphrased.png"):
        assert (tmp_path / "out" / png).stat().st_size > 1000
    assert json.loads((tmp_path / "out" / "report.json").read_text())["conditions"]["paraphrased"]["detectors"]


def test_report_entry_point_and_config(tmp_path, capsys):
    from configs import compose

    from zcp.validate.study import run_report

    run = _run_dir(tmp_path, "verb")
    cfg = compose("report", f"report.verbatim.run_dir={run}", f"output_dir={tmp_path / 'o'}", "logger=none")
    run_report(cfg)
    assert "Verbatim leak" in (tmp_path / "o" / "report.md").read_text()
    assert (tmp_path / "o" / "config.yaml").exists()


@pytest.mark.parametrize("override", [["report.verbatim.foo=1"], ["report.metrics=[bogus]"], ["reports=1"],
                                      ["report.verbatim.run_dir=/no/such/dir"], []])
def test_report_config_refuses_bad_keys(override, tmp_path):
    from configs import compose
    from hydra.errors import ConfigCompositionException

    from zcp.errors import ConfigError
    from zcp.validate.study import run_report

    with pytest.raises((ConfigCompositionException, ConfigError)):
        run_report(compose("report", *override, f"output_dir={tmp_path}", "logger=none"))


def test_detector_study_experiment_composes():
    from configs import compose

    from zcp.config import validate

    rep = validate(compose("report", "experiment=detector_study"))["report"]
    assert rep.verbatim.run_dir and rep.paraphrased.run_dir


def _exposure_run(root, name, k, epochs, ppl_auroc):
    run = _run_dir(root, f"detexp__{name}")
    write_json(run / "exposure.json", {"knobs": {"k": k, "sft_epochs": float(epochs), "answer_only_fraction": 0.75,
                                                 "answer_format": "probe", "clean_fraction": 0.5, "grpo_steps": 20,
                                                 "lora_r": 16, "lr": 0.005}})
    write_json(run / "run_config.json", {"config": {"stages": ["contaminate", "detect", "baselines"]}})
    write_json(run / "detect" / "simulation_summary.json", {})  # the detection stage finished
    b = _baselines_dir(run)
    summ = json.loads((b / "summary.json").read_text())
    summ["detectors"]["ppl"]["auroc"] = ppl_auroc
    write_json(b / "summary.json", summ)
    return run


def test_report_over_exposure_tabulates_each_level_and_leak_kind(tmp_path):
    from zcp.validate.detectors import spec_of
    from zcp.validate.study import exposure_run_dirs

    root = tmp_path / "contaminate"
    _exposure_run(root, "a", 6, 10, 0.61)   # paraphrased, exposure 60
    _exposure_run(root, "b", 0, 20, 0.97)   # verbatim, exposure 20
    _exposure_run(root, "c", 1, 2, 0.52)    # paraphrased, exposure 2
    _exposure_run(root, "d", 0, 2, 0.88)    # verbatim, exposure 2
    unfinished = _run_dir(root, "detexp__e")  # detection but no exposure.json / baselines
    # a further run_baselines.py output in one run: ppl with text=chat_answer is a row of its own
    chat = root / "detexp__a" / "baselines_chat"
    chat.mkdir()
    write_json(chat / "summary.json", {"detectors": {
        "ppl": {"label": "Perplexity", "params": {"text": "chat_answer"}, "auroc": 0.93, "tpr_at_5fpr": 0.5,
                "files": {}, "skipped": None},
        "dpcc": {"label": "DPCC", "params": {}, "auroc": 0.11, "tpr_at_5fpr": 0.0, "files": {}, "skipped": None}}})
    dirs = exposure_run_dirs(root, "detexp")
    assert len(dirs) == 5
    rep = build_report({}, tmp_path / "out", ["acc", "p_all"], exposure_dirs=dirs)
    runs = rep["exposure"]["runs"]
    assert [(e["kind"], e["level"]) for e in runs] == [("verbatim", 2), ("verbatim", 20), ("paraphrased", 2),
                                                        ("paraphrased", 60)]
    assert rep["exposure"]["unfinished"][0]["run"] == str(unfinished)
    md = (tmp_path / "out" / "report.md").read_text()
    verb, para = md.split("### Paraphrased leak")
    assert "| Detector | 2 (originals x 2 ep) | 20 (originals x 20 ep) |" in verb
    assert "| Detector | 2 (k=1 x 2 ep) | 60 (k=6 x 10 ep) |" in para
    # the numbers put in, in level order; verdicts as given (C flagged, U not)
    assert f"| {spec_of('ppl').label} | 0.88 / 0.12, C yes, U no | 0.97 / 0.12, C yes, U no |" in verb
    assert f"| {spec_of('ppl').label} | 0.52 / 0.12, C yes, U no | 0.61 / 0.12, C yes, U no |" in para
    assert f"| {spec_of('zcp_p_all').label} | 1.00 / 1.00, C yes, U no |" in para
    assert f"| {spec_of('dpcc').label} | skipped at every level: needs a reference set | |" in para
    assert f"| {spec_of('ppl').label} (text=chat_answer) | — | 0.93 / 0.50, C —, U — |" in para
    assert "0.11" not in md  # dpcc with its defaults is already in the stage's baselines/: not repeated
    assert "1 run(s) not finished" in md and "baselines" not in rep["exposure"]["unfinished"][0]["missing"]
    assert (tmp_path / "out" / "auroc_vs_exposure.png").stat().st_size > 1000


def test_report_over_exposure_from_the_entry_point(tmp_path):
    from configs import compose

    from zcp.errors import ConfigError
    from zcp.validate.study import run_report

    root = tmp_path / "contaminate"
    _exposure_run(root, "a", 1, 2, 0.5)
    cfg = compose("report", f"report.exposure.root={root}", "report.exposure.name=detexp",
                  f"output_dir={tmp_path / 'o'}", "logger=none")
    run_report(cfg)
    assert "## Detectors versus exposure" in (tmp_path / "o" / "report.md").read_text()
    for bad, match in ((["report.exposure.name=nothing"], "no .*nothing__"),
                       ([f"report.exposure.runs=[{tmp_path / 'nope'}]"], "no such directory")):
        with pytest.raises(ConfigError, match=match):
            run_report(compose("report", f"report.exposure.root={root}", *bad,
                               f"output_dir={tmp_path / 'o2'}", "logger=none"))


def test_report_shows_more_sample_size_studies(tmp_path):
    d = _ablations_dir(tmp_path)
    rep = build_report({}, tmp_path / "out", ["acc"], sample_size_dirs=[str(d)])
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Sample size on `ablations` (20 C / 20 U items; 20 random subsets per N, B = 1000" in md
    assert "0.65 / 0.777 ± 0.044" in md and str(d) in rep["sample_size"]
    assert (tmp_path / "out" / "sample_size_extra0.png").stat().st_size > 1000
    bare = tmp_path / "bare"
    bare.mkdir()
    write_json(bare / "summary.json", {"truncation": {}})
    with pytest.raises(ValueError, match="no sample_size study"):
        build_report({}, tmp_path / "out2", ["acc"], sample_size_dirs=[str(bare)])
