"""Typed config groups: unknown keys and wrong types fail at compose time, ranges and choices right after."""

import pytest
from configs import compose
from hydra.errors import ConfigCompositionException
from hypothesis import given, settings
from hypothesis import strategies as st

from zcp.config import validate
from zcp.config.schemas import RunConfig
from zcp.errors import ConfigError
from zcp.probe.probe_config import StatsConfig
from zcp.simulate.simulation_config import ExposureConfig, SimDetectConfig


@pytest.mark.parametrize(("name", "extra"), [("detect", ["data.path=x", "data.reference_path=y"]), ("demo", []),
                                             ("contaminate", []), ("contaminate", ["experiment=exposure_sweep"])])
def test_real_configs_compose_and_validate(name, extra):
    checked = validate(compose(name, *extra))
    assert isinstance(checked["stats"], StatsConfig) and isinstance(checked["run"], RunConfig)
    if name != "detect":
        assert isinstance(checked["detect"], SimDetectConfig) and isinstance(checked["exposure"], ExposureConfig)
        # the exposure knobs that follow the training profile are resolved numbers
        assert float(checked["exposure"].sft_epochs) > 0 and int(checked["exposure"].lora_r) >= 1


@pytest.mark.parametrize(("name", "extra"), [
    ("detect", ["data=gsm8k", "data.reference_path=y"]), ("detect", ["data=omnimath", "data.reference_path=y"]),
    ("build_data", ["data=wordproblems"]), ("build_data", ["data=arithmark"]),
    ("detect", ["data.path=x", "data.reference_path=y", "data.fields={question: problem}", "+data.variant_paths.more=z"]),
])
def test_every_data_option_extends_the_typed_schema(name, extra):
    cfg = compose(name, *extra)
    validate(cfg)
    with pytest.raises(ConfigCompositionException):
        compose(name, *extra, "data.limitt=3")


@pytest.mark.parametrize(("override", "key"), [("data.pair_by=row", "data.pair_by"), ("data.limit=0", "data.limit"),
                                              ("data.format=csv", "data.format"), ("data.on_invalid=ignore", "data.on_invalid")])
def test_data_values_are_checked(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(compose("detect", "data.path=x", "data.reference_path=y", override))


def test_defaults_live_in_the_schema():
    cfg = compose("detect", "data.path=x", "data.reference_path=y")
    assert dict(cfg.stats) == {"test": "permutation", "bootstrap_samples": 10_000, "alpha": 0.05,
                               "reference_draws": "all", "void_malformed": 0.5}
    assert compose("demo").run.chunk_size == 256  # the demo's one override


@pytest.mark.parametrize("override", ["stats.bootstrap_sample=5", "stats.alpha=high", "run.chunk=3",
                                      "exposure.kk=2", "detect.m=three", "run.progress=maybe"])
def test_unknown_keys_and_wrong_types_fail_at_compose(override):
    with pytest.raises(ConfigCompositionException):
        compose("contaminate", override)


@pytest.mark.parametrize(("override", "key"), [
    ("stats.bootstrap_samples=0", "stats.bootstrap_samples"), ("stats.bootstrap_samples=-5", "stats.bootstrap_samples"),
    ("stats.alpha=2", "stats.alpha"), ("stats.reference_draws=perseed", "stats.reference_draws"),
    ("stats.void_malformed=1.5", "stats.void_malformed"), ("stats.void_malformed=-0.1", "stats.void_malformed"),
    ("stats.test=sign", "stats.test"), ("run.chunk_size=0", "run.chunk_size"), ("detect.seeds=[]", "detect.seeds"),
    ("detect.m=0", "detect.m"), ("exposure.leak_fraction=1.5", "exposure.leak_fraction"),
    ("exposure.leak_fraction=-0.5", "exposure.leak_fraction"), ("exposure.sham_items=0", "exposure.sham_items"),
    ("exposure.clean_fraction=1", "exposure.clean_fraction"), ("exposure.lora_r=2.5", "exposure.lora_r"),
    ("exposure.grpo_prompts=all", "exposure.grpo_prompts"),
])
def test_out_of_range_values_fail_before_anything_runs(override, key):
    cfg = compose("contaminate", override)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg)


_VALUES = st.one_of(st.integers(-3, 20_000), st.floats(-2, 3), st.just(float("nan")), st.booleans(),
                    st.sampled_from(["all", "per_seed", "perseed", "permutation", "bootstrap", "x", "null", "[]",
                                     "[0,1]", "[1,1]", "variants", "originals"]))
_KEYS = ["stats.test", "stats.bootstrap_samples", "stats.alpha", "stats.reference_draws", "run.chunk_size",
         "detect.m", "detect.seeds", "exposure.k", "exposure.leak_fraction", "exposure.answer_only_fraction",
         "exposure.clean_fraction", "exposure.grpo_prompts"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KEYS), _VALUES), min_size=1, max_size=4))
def test_fuzzed_overrides_fail_loudly_or_hold_valid_values(pairs):
    """No accepted config carries an out-of-range value: every override is refused or lands valid."""
    overrides = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in dict(pairs).items()]
    try:
        checked = validate(compose("contaminate", *overrides))
    except (ConfigCompositionException, ConfigError):
        return
    s, r, d, e = checked["stats"], checked["run"], checked["detect"], checked["exposure"]
    assert s.test in ("permutation", "bootstrap") and s.bootstrap_samples >= 1 and 0 < s.alpha < 1
    assert s.reference_draws in ("all", "per_seed") and r.chunk_size >= 1
    assert d.m >= 1 and d.seeds and len(set(d.seeds)) == len(d.seeds)
    assert e.k >= 0 and 0 <= e.leak_fraction <= 1 and 0 <= e.answer_only_fraction <= 1 and 0 <= e.clean_fraction < 1
