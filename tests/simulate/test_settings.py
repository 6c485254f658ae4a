"""zcp.simulate.settings: the contamination job reads its config through the schema dataclasses (defaults defined
once, in zcp.config.schemas), while the run dir's identity stays made of the plain values as given."""

import dataclasses

import pytest
from configs import compose
from omegaconf import OmegaConf

from zcp.config.schemas import validate
from zcp.errors import ConfigError
from zcp.simulate.settings import SimConfig, field_default, sim_config
from zcp.simulate.simulation_config import BenchmarkConfig, CleanConfig, ExposureConfig
from zcp.simulate.train_config import TrainConfig

PROFILE = {"sft": {"num_train_epochs": 3, "learning_rate": 0.1}, "lora": {"r": 8}, "grpo": {"max_steps": 0}}


def test_a_group_left_out_reads_the_schema_defaults():
    s = sim_config({"train": PROFILE})
    assert s.benchmark == BenchmarkConfig()
    assert s.clean.answer_only_fraction == field_default(CleanConfig, "answer_only_fraction")
    assert (s.seed, s.name, s.output_dir, s.stages) == (0, "contaminate", None, ["contaminate"])
    assert s.data is None  # the optional `data` group


def test_knobs_that_follow_the_profile_resolve_against_the_same_config():
    """exposure.sft_epochs/lr/lora_r/grpo_steps default to the train profile (as Hydra resolves them when composing);
    a value given wins; eval.max_new_tokens follows train.eval_max_new_tokens, its schema default included."""
    ex = sim_config({"train": PROFILE}).exposure
    assert (ex.sft_epochs, ex.lr, ex.lora_r, ex.grpo_steps) == (3, 0.1, 8, 0)
    assert sim_config({"train": PROFILE, "exposure": {"lr": 0.5}}).exposure.lr == 0.5
    assert sim_config({}).eval.max_new_tokens == field_default(TrainConfig, "eval_max_new_tokens")
    assert sim_config({"train": {"eval_max_new_tokens": 40}}).eval.max_new_tokens == 40
    assert sim_config({"eval": {"max_new_tokens": 7}}).eval.max_new_tokens == 7


def test_a_knob_that_does_not_resolve_or_a_bad_value_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"exposure\.sft_epochs") as e:
        sim_config({}).exposure  # noqa: B018  (no train profile to follow, none given)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"benchmark\.n=1"):
        sim_config({"benchmark": {"n": 1}}).benchmark  # noqa: B018
    with pytest.raises(ConfigError, match=r"benchmark: unknown key 'sorce'"):
        sim_config({"benchmark": {"sorce": "file"}}).benchmark  # noqa: B018
    with pytest.raises(ConfigError, match=r"seed='x'"):
        sim_config({"seed": "x"}).seed  # noqa: B018
    # a group read only when a function needs it: a bad benchmark does not stop reading the exposure
    assert sim_config({"benchmark": {"n": 1}, "train": PROFILE}).exposure.k == field_default(ExposureConfig, "k")


def test_the_added_split_seed_key_is_typed_and_defaults_to_the_run_seed():
    assert sim_config({"seed": 4}).split_seed == 4
    s = sim_config({"seed": 4, "split": {"seed": 9, "c_fraction": 0.5}})
    assert (s.split_seed, s.split_seed_override, s.split.c_fraction) == (9, 9, 0.5)
    with pytest.raises(ConfigError, match=r"split\.seed='x'"):
        sim_config({"split": {"seed": "x"}}).split_seed  # noqa: B018


def test_groups_equal_what_the_entry_point_validates():
    """On a composed config the groups the job reads are the ones validate(job="contaminate") builds, and the plain
    values are kept as given (the fingerprint's input)."""
    cfg = compose("contaminate", "exposure.k=2", "+split.seed=3", "clean.answer_only_fraction=null",
                  resolve=True)
    root = validate(cfg, job="contaminate")["__job__"]
    s = sim_config(cfg)
    read = [f.name for f in dataclasses.fields(root) if hasattr(SimConfig, f.name)]
    for name in read:
        assert getattr(s, name) == getattr(root, name), name
    # the rest is the detection stage's statistics, which zcp.simulate.pipeline validates itself (`run` is read: the
    # training stages' pre-flight limit, zcp.simulate.preflight)
    assert {f.name for f in dataclasses.fields(root)} - set(read) == {"stats"}
    assert s.values == cfg and s.split_seed == 3
    assert sim_config(s) is s  # a SimConfig is passed through, its groups built once


def test_the_run_dir_is_hashed_from_the_plain_values():
    """Reading the schema defaults does not change the run dir: a config without a key keeps its hash."""
    from zcp.simulate.rundir import _canonical, _run_dir, is_sham

    cfg = compose("contaminate", resolve=True)
    assert _run_dir(cfg) == _run_dir(SimConfig(cfg)) == _run_dir(OmegaConf.create(cfg))
    assert "families" not in _canonical({"benchmark": {"n": 4}})["benchmark"]
    assert not is_sham({}) and is_sham({"leak_fraction": 0}) and is_sham(ExposureConfig(leak_fraction=0.0, **_knobs()))


def _knobs() -> dict:
    return {"sft_epochs": 1, "lr": 0.1, "lora_r": 4, "grpo_steps": 0}
