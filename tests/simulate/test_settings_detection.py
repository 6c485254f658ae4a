"""zcp.simulate.settings: the detection stage's groups (`detect`, `probe`) read through their schemas, as the
stage read them before from the raw values (the same settings, the same defaults, the added keys kept); and the
pretraining job's `out_dir` default defined once, in PretrainBaseJob."""

import pytest

from zcp.config.schemas import validate
from zcp.errors import ConfigError
from zcp.probe.detect import probe_config
from zcp.simulate.pipeline import validate_detect
from zcp.simulate.settings import sim_config
from zcp.simulate.simulation_config import SimDetectConfig
from zcp.simulate.train_config import PretrainBaseJob


def test_detect_group_left_out_is_the_schema_default_and_a_given_one_is_checked():
    assert sim_config({}).detect == SimDetectConfig()
    assert validate_detect({"detect": {"m": 2}}).m == 2
    with pytest.raises(ConfigError, match=r"detect\.m"):
        sim_config({"detect": {"m": 0}}).detect  # noqa: B018


def test_probe_settings_equal_probe_config_on_the_raw_group():
    """Left out, given, with an added key (`+probe.api_instruction`) and with the model's own probe settings: the
    ProbeConfig the stage gets is the one probe_config built from the plain values."""
    cases = [
        {},
        {"probe": {"zero_cot_max_tokens": 7, "metrics": ["p_first"]}},
        {"probe": {"api_instruction": "Answer now."}},
        {"probe": {"full_cot_max_tokens": 40}, "model": {"probe": {"full_cot_max_tokens": 99}}},
    ]
    for cfg in cases:
        got = sim_config(cfg).probe_settings
        assert got == probe_config(cfg.get("probe", {}), cfg.get("model")), cfg
    assert sim_config(cases[2]).probe_settings.api_instruction == "Answer now."
    assert sim_config(cases[3]).probe_settings.full_cot_max_tokens == 99


def test_pretrain_out_dir_default_is_the_schema_one_and_an_empty_one_is_refused():
    assert validate({}, job="pretrain_base")["__job__"].out_dir == PretrainBaseJob.out_dir
    with pytest.raises(ConfigError, match=r"out_dir=''"):
        validate({"out_dir": ""}, job="pretrain_base")
