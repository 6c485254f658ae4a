"""p_first_norm / p_all_norm: the gold answer's score relative to its score under a neutral prompt."""

import math

import pytest
from configs import compose
from fakes import FakeBackend

from zcp.backends.base import Prompt, ScoreResult
from zcp.config import validate
from zcp.core.items import Item
from zcp.probe.detect import DetectDataset, DetectSettings, detect
from zcp.probe.metrics import BUILTIN_METRICS, get_metric, needing
from zcp.probe.normalised import NEUTRAL_QUESTION, NORMALISED_METRICS, neutral_prompt
from zcp.probe.prompts import ProbeConfig, probe_items, truncated_cot_prompt


def _dataset(n=30, m=3):
    """Originals with round answers (multiples of 10), reference draws without: a shape the builder missed."""
    items = [Item(f"i{k}", f"Item {k}: how many apples?", str(10 * (k + 1))) for k in range(n)]
    ref = {it.id: [Item(f"{it.id}::r{j}", f"Item {k}, drawn {j}: how many apples?", str(10 * (k + 1) + 1 + j))
                   for j in range(m)] for k, it in enumerate(items)}
    return DetectDataset("D", items, ref)


class ShapePrior(FakeBackend):
    """Per-token log-prob: a prior on the answer's shape (round answers 3x likelier) times, for `memorised`
    questions, a factor 4; a question's own number adds nothing. Records every prompt it scores."""

    def __init__(self, memorised=None):
        super().__init__(memorised or {})
        self.seen: list[str] = []

    def score(self, requests):
        self._tick("score")
        out = []
        for r in requests:
            self.seen.append(r.prompt.user)
            answer = r.continuation.rstrip("}")
            prior = 0.15 if answer.endswith("0") else 0.05
            p = prior * (4 if r.prompt.user in self.memorised else 1)
            out.append(ScoreResult(tuple(math.log(p) for _ in r.continuation)))
        return out


PROBE = ProbeConfig(metrics=("p_first", "p_all", "p_first_norm", "p_all_norm"))
SETTINGS = DetectSettings(bootstrap_samples=999, progress=False)


def test_normalisation_cancels_a_prior_on_answer_shape(tmp_path):
    s = detect(ShapePrior(), [_dataset()], PROBE, tmp_path, SETTINGS)
    by = {r["metric"]: r for r in s["results"]}
    assert by["p_first"]["c_cont"] > 0.95 and by["p_all"]["c_cont"] > 0.95  # the clean model is flagged
    for name in NORMALISED_METRICS:
        assert by[name]["diff"] == pytest.approx(0.0, abs=1e-12) and by[name]["p_value"] == 1.0
        assert by[name]["c_cont"] == 0.5


def test_a_leak_survives_the_normalisation(tmp_path):
    ds = _dataset()
    leaked = {it.question: it.answer for it in ds.originals}
    s = detect(ShapePrior(leaked), [ds], ProbeConfig(metrics=("p_first_norm", "p_all_norm")), tmp_path, SETTINGS)
    by = {r["metric"]: r for r in s["results"]}
    assert by["p_first_norm"]["diff"] == pytest.approx(math.log(4)) and by["p_all_norm"]["at_floor"]
    assert s["verdicts"][0]["contaminated"]


def test_records_and_the_neutral_pass():
    items = [Item("a", "Q a: how many?", "20"), Item("b", "Q b: how many?", "20"), Item("c", "Q c?", "7")]
    backend = ShapePrior({"Q a: how many?": "20"})
    recs = probe_items(backend, items, PROBE)
    neutral = [u for u in backend.seen if "Q " not in u]
    assert neutral == [NEUTRAL_QUESTION] * 2  # one neutral score per distinct answer, once for both metrics
    assert backend.calls["score"] == 2
    assert recs[0]["p_first_neutral"] == pytest.approx(0.15) and recs[2]["p_all_neutral"] == pytest.approx(0.05)
    assert recs[0]["p_first_norm"] == pytest.approx(math.log(4)) and recs[1]["p_all_norm"] == pytest.approx(0.0)
    assert recs[2]["p_first_norm"] == pytest.approx(0.0, abs=1e-12)


def test_neutral_prompt_keeps_the_rendering_and_drops_the_item():
    cfg = ProbeConfig(user_template="Problem: {question}", system="Be brief.")
    p = neutral_prompt(truncated_cot_prompt("How many cats?", "First, 3 + 4 = 7.", cfg), cfg)
    assert p == Prompt(user=f"Problem: {NEUTRAL_QUESTION}", assistant_prefix=cfg.zero_cot_prefix, system="Be brief.")


def test_registered_selectable_and_not_default():
    assert BUILTIN_METRICS == ("acc", "con", "p_first", "p_all")
    assert all(get_metric(m).kind == "continuous" for m in NORMALISED_METRICS)
    assert needing(NORMALISED_METRICS, "logprobs") == list(NORMALISED_METRICS)  # refused where log-probs are not
    job = validate(compose("detect", "data.path=x", "data.reference_path=y",
                           "probe.metrics=[p_first,p_all,p_first_norm,p_all_norm]"), job="detect")["__job__"]
    assert list(job.probe.metrics) == list(PROBE.metrics)
    default = validate(compose("detect", "data.path=x", "data.reference_path=y"), job="detect")["__job__"]
    assert not set(default.probe.metrics) & set(NORMALISED_METRICS)
