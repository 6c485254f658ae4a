"""The backend registry and the typed `model` group: every conf/model/*.yaml composes and validates,
misspelt keys fail at compose time, `model.backend` picks the engine (imported lazily), and the model's
`chat_template_kwargs` (Qwen3's enable_thinking=False) reach every prompt a detection run renders."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from configs import compose
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

import zcp.config
from zcp.backends.base import Prompt
from zcp.backends.hf import HFBackend
from zcp.benchmarks.loaders import save_items
from zcp.config.model import ModelConfig, model_config
from zcp.config.schemas import validate
from zcp.core.items import Item
from zcp.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
MODELS = sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml"))
# a chat template that renders differently in thinking and non-thinking mode, like Qwen3's
THINK_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                  "{% if add_generation_prompt %}<|assistant|>\n"
                  "{% if enable_thinking is defined and not enable_thinking %}NOTHINK {% else %}THINK {% endif %}"
                  "{% endif %}")


@pytest.mark.parametrize("model", MODELS)
def test_every_model_config_composes_and_validates(model):
    cfg = compose("detect", f"model={model}", "model.path=org/name" if model == "local" else "seed=0")
    checked = validate(cfg)["model"]
    assert isinstance(checked, ModelConfig) and checked.backend == "hf"
    if model == "qwen3-8b":
        assert checked.chat_template_kwargs == {"enable_thinking": False}


@pytest.mark.parametrize("override", ["model.chat_template_kwarg={enable_thinking:false}",
                                      "model.vllm.tensor_parallel=2", "model.api.key=sk-123"])
def test_misspelt_model_keys_fail_at_compose(override):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose("detect", override)


@pytest.mark.parametrize(("override", "key"), [("model.backend=tgi", "model.backend"),
                                               ("model.vllm.tensor_parallel_size=0", "model.vllm.tensor_parallel_size"),
                                               ("model.api.endpoint=responses", "model.api.endpoint"),
                                               ("model.api.api_key_env=sk-live-123", "model.api.api_key_env"),
                                               ("model.max_length=0", "model.max_length")])
def test_out_of_range_model_values_fail_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(compose("detect", override))


def test_registry_picks_engine_and_config_delegates(monkeypatch):
    from zcp.backends import Backend, backend_names, build_backend, register_backend

    assert {"hf", "vllm", "openai"} <= set(backend_names())
    built = {}

    class Dummy(Backend):
        fingerprint = "w"

    def builder(cfg, progress):
        built["cfg"] = cfg
        return Dummy()

    from zcp.backends import registry

    monkeypatch.setitem(registry._REGISTRY, "dummy", None)  # removed again after the test
    register_backend("dummy", builder)
    b = zcp.backends.registry.build_backend({"backend": "dummy", "path": str(REPO / "zcp" / "assets" / "base_model"),
                                  "chat_template_kwargs": {"enable_thinking": False}})
    assert b.name == "base_model" and built["cfg"].chat_template_kwargs == {"enable_thinking": False}
    assert b.fingerprint == 'w|{"chat_template_kwargs": {"enable_thinking": false}}'  # rendering is part of it
    with pytest.raises(ConfigError, match=r"model\.backend"):
        build_backend({"backend": "nope", "path": "org/name"})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['batchsize'\]"):
        build_backend({"path": "org/name", "batchsize": 3})


def test_vllm_backend_without_vllm_says_how_to_install():
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401

        pytest.skip("vllm is installed here")
    except ImportError:
        pass
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[vllm\]'"):
        zcp.backends.registry.build_backend({"backend": "vllm", "path": str(REPO / "zcp" / "assets" / "base_model")})


def test_model_probe_settings_override_the_probe_group():
    from zcp.probe.detect import probe_config

    cfg = compose("detect", "model=qwen2.5-math-7b-instruct", "probe.full_cot_max_tokens=99",
                  "probe.zero_cot_max_tokens=7")
    probe = probe_config(cfg.probe, cfg.model)
    assert probe.full_cot_max_tokens == 1024 and probe.zero_cot_max_tokens == 7
    assert probe.full_cot_suffix.startswith("\nPlease reason step by step")
    assert probe_config(cfg.probe).full_cot_max_tokens == 99
    assert model_config(cfg.model).probe.overrides()["full_cot_max_tokens"] == 1024


def test_chat_false_never_renders_the_template(tiny_model, tiny_tok):
    p = Prompt("Ann has 3 pens.", "The final answer is: ")
    assert "<|user|>" in HFBackend(tiny_model, tiny_tok).render(p)
    assert HFBackend(tiny_model, tiny_tok, chat=False).render(p) == "Ann has 3 pens.\nThe final answer is: "


def test_enable_thinking_false_reaches_every_prompt_of_a_detection_run(tmp_path, monkeypatch):
    from zcp.backends.tokenized import TokenizedBackend
    from zcp.core.testing import tiny_llama, train_tokenizer
    from zcp.probe.run import run_detect

    texts = [f"Ann has {i} pens and gets {i % 9 + 1} more. How many pens? The final answer is: \\[ \\boxed{{{i}}} \\]"
             for i in range(120)]
    tok = train_tokenizer(texts, vocab_size=360, chat_template=THINK_TEMPLATE)
    model = tiny_llama(tok, hidden=32, layers=1, heads=2)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    rng = random.Random(0)
    items, refs = [], []
    for i in range(4):
        a, b = rng.randint(10, 99), rng.randint(1, 9)
        items.append(Item(f"q{i}", f"Ann has {a} pens and gets {b} more. How many pens?", str(a + b)))
        refs.append(Item(f"q{i}::r0", f"Ann has {a + 1} pens and gets {b} more. How many pens?", str(a + b + 1),
                         metadata={"original_id": f"q{i}"}))
    save_items(tmp_path / "d.jsonl", items)
    save_items(tmp_path / "r.jsonl", refs)
    rendered: list[str] = []
    real = TokenizedBackend.render

    def spy(self, prompt):
        text = real(self, prompt)
        rendered.append(text)
        return text

    monkeypatch.setattr(TokenizedBackend, "render", spy)
    common = [f"model.path={tmp_path / 'model'}", f"data.path={tmp_path / 'd.jsonl'}",
              f"data.reference_path={tmp_path / 'r.jsonl'}", "logger=none", "probe.full_cot_max_tokens=8",
              "probe.zero_cot_max_tokens=4", "stats.bootstrap_samples=50", "run.progress=false"]
    run_detect(compose("detect", *common, f"output_dir={tmp_path / 'off'}",
                       "+model.chat_template_kwargs.enable_thinking=false"))
    assert len(rendered) >= 3 * len(items + refs)  # scoring, zero-CoT and full-CoT prompts (and token counts)
    assert all("<|assistant|>\nNOTHINK " in t for t in rendered), [t for t in rendered if "NOTHINK" not in t][:1]
    rendered.clear()
    run_detect(compose("detect", *common, f"output_dir={tmp_path / 'on'}"))  # the template's default: thinking
    assert rendered and all("<|assistant|>\nTHINK " in t for t in rendered)


def test_gpu_7b_grpo_rolls_out_with_vllm_colocate():
    """The 7-8B profile asks TRL for vLLM rollouts in colocate mode; a dry run builds TRL's GRPOConfig from it."""
    from omegaconf import OmegaConf
    from trl import GRPOConfig

    from zcp.simulate.sft import trainer_args

    cfg = compose("contaminate", "train=gpu_7b", "model=qwen2.5-math-7b-instruct")
    grpo = OmegaConf.to_container(cfg.train.grpo, resolve=True)
    # cpu=True: this machine has no GPU (bf16 is switched off); every configured field is still checked
    args = trainer_args(GRPOConfig, grpo, output_dir="unused", seed=0, report_to="none", cpu=True)
    assert args.use_vllm and args.vllm_mode == "colocate"
    assert 0 < args.vllm_gpu_memory_utilization < 1 and args.vllm_tensor_parallel_size >= 1


def test_engines_implement_the_backend_interface(tiny_model, tiny_tok, monkeypatch):
    from zcp.backends.base import Backend
    from zcp.backends.openai_api import OpenAIBackend

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    api = OpenAIBackend("served", base_url="http://127.0.0.1:9/v1", endpoint="chat",
                        chat_template_kwargs={"enable_thinking": False})
    assert isinstance(api, Backend) and isinstance(HFBackend(tiny_model, tiny_tok), Backend)
    assert api.render(Prompt("hi")) == '[{"role": "user", "content": "hi"}]' and "served" in api.fingerprint


def test_max_length_caps_the_context_a_probe_may_use(tiny_model, tiny_tok):
    from zcp.probe.detect import fit_context
    from zcp.probe.prompts import ProbeConfig

    full = HFBackend(tiny_model, tiny_tok)
    capped = HFBackend(tiny_model, tiny_tok, max_length=40)
    assert full.context_length == tiny_model.config.max_position_embeddings and capped.context_length == 40
    assert HFBackend(tiny_model, tiny_tok, max_length=10**6).context_length == tiny_model.config.max_position_embeddings
    units = [(("d", "original", "q0", 0), Item("q0", "Ann has 3 pens and gets 4 more. How many pens? " * 3, "7"))]
    probe = ProbeConfig(metrics=("p_first", "p_all"))
    assert fit_context(units, full, probe, "skip") == (units, [])
    kept, report = fit_context(units, capped, probe, "skip")
    assert kept == [] and report[0]["context_length"] == 40


def test_table6_evaluation_renders_with_the_model_configs_chat_template_kwargs(monkeypatch):
    """The contamination job's full-CoT evaluation (Table 6) holds its model in memory; it must render the
    prompts as training and detection do (Qwen3 non-thinking), not in the template's default mode."""
    from zcp.backends.tokenized import TokenizedBackend
    from zcp.core.testing import tiny_llama, train_tokenizer
    from zcp.simulate.contaminate import full_cot_eval

    tok = train_tokenizer([f"Ann has {i} pens. How many pens? {i}" for i in range(60)], vocab_size=300,
                          chat_template=THINK_TEMPLATE)
    model = tiny_llama(tok, hidden=32, layers=1, heads=2)
    rendered: list[str] = []
    real = TokenizedBackend.render
    monkeypatch.setattr(TokenizedBackend, "render", lambda self, p: rendered.append(real(self, p)) or rendered[-1])
    items = [Item("q0", "Ann has 3 pens. How many pens?", "3")]
    full_cot_eval(model, tok, items, max_new_tokens=2, chat_template_kwargs={"enable_thinking": False})
    assert rendered and all(r.endswith("NOTHINK ") for r in rendered)
    rendered.clear()
    full_cot_eval(model, tok, items, max_new_tokens=2)  # the template's default: thinking mode
    assert rendered and all(r.endswith("THINK ") and not r.endswith("NOTHINK ") for r in rendered)
