"""The Zero-CoT Probe: prompts, and the per-item records its metrics read (the metric table: zcp.probe.metrics).

Zero-CoT (open weights): the assistant turn is pre-filled with `The final answer is: \\[ \\boxed{` so
the model must answer at once. Zero-CoT (API, no pre-fill): an instruction is appended to the user
turn. Full-CoT: the normal prompt. The built-in metrics follow section 3.4 of the paper:
- acc: the greedy zero-CoT answer is equivalent to the gold answer;
- con: the zero-CoT answer is equivalent to the full-CoT answer (no gold label needed);
- p_first = P(t1 | x^); p_all = exp(mean_k log P(tk | x^, t<k)) by teacher forcing, over the tokens of
  the gold answer followed by the text that ends it (`scored_continuation`: the brace closing the
  pre-filled box), tokenised in context right after the prefix. Scoring the end too is what keeps a
  strict prefix of the model's answer (gold "5" where the model answers "50") from scoring as the answer.
An answer that cannot be extracted or parsed is malformed: counted, and scored as wrong.
The pre-fill is one answer convention (zcp.probe.conventions): after a box the answer runs to the brace that closes
it; after a line convention (`#### `, `The answer is `) to its end (`extract_after_prefill`); a multi-convention run
(zcp.probe.multiconv) gives each convention's probe its pre-fill as `zero_cot_prefix` and its name in `extra`.
Which passes run is read from the table: the score pass when a metric needs log-probs, the zero-CoT
generation when one needs the greedy answer, the full-CoT generation when one needs it; a metric with its own
pass (`ProbeMetric.probe`) runs it after the zero-CoT passes.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zcp.backends.base import Backend, GenerationRequest, Prompt, ScoreRequest, ScoreResult
from zcp.core.answers import (
    BOX_OPENERS,
    FINAL_ANSWER_PREFIX,
    answers_equal,
    extract_boxed,
    is_parsable,
)
from zcp.core.io import stable_hash
from zcp.core.items import Item
from zcp.probe.conventions import (
    BOX_CONVENTIONS,
    answer_end,
    extract_after_prefill,
    full_cot_stop,
    opens_group,
    read_full_cot,
    zero_cot_stop,
)
from zcp.probe.metrics import BUILTIN_METRICS, get_metric, metric_names, needing, unknown_metrics

ZERO_COT_PREFIX = FINAL_ANSWER_PREFIX  # the answer line up to the brace (zcp.core.answers)
ANSWER_SPACES = ("exact", "both")  # probe.answer_space: the gold answer scored as written, or with/without a space
API_INSTRUCTION = (
    "Please ONLY put your final answer within \\boxed{} directly without any other content before or "
    "after it (e.g., reasoning or explanation)"
)


@dataclass
class ProbeConfig:
    """How prompts are built and how much the model may generate."""

    metrics: tuple[str, ...] = BUILTIN_METRICS
    mode: str = "auto"  # auto | prefill | api
    user_template: str = "{question}"
    full_cot_suffix: str = ""  # e.g. "\nPlease reason step by step, and put your final answer within \\boxed{}."
    system: str | None = None
    zero_cot_prefix: str = ZERO_COT_PREFIX
    # The text scored after the gold answer (p_first/p_all): None derives it from zero_cot_prefix
    # (`answer_end`: one "}" per brace group the prefix leaves open, else a newline); a string overrides.
    answer_suffix: str | None = None
    api_instruction: str = API_INSTRUCTION
    zero_cot_max_tokens: int = 32
    full_cot_max_tokens: int = 512
    # p_first/p_all of the gold answer as written right after the pre-fill (exact, today's score) or in both
    # spellings, with and without a leading space (both: `spaced_scores`)
    answer_space: str = "exact"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metrics = tuple(self.metrics)
        bad = unknown_metrics(self.metrics)
        if bad:
            raise ValueError(f"unknown metric(s) {bad}; choose from {list(metric_names())}")
        if self.mode not in ("auto", "prefill", "api"):
            raise ValueError(f"probe.mode must be auto, prefill or api, not {self.mode!r}")
        if self.answer_suffix is not None and not isinstance(self.answer_suffix, str):
            raise ValueError(f"probe.answer_suffix must be null or a string, not {self.answer_suffix!r}")
        if self.answer_space not in ANSWER_SPACES:
            raise ValueError(f"probe.answer_space must be one of {list(ANSWER_SPACES)}, not {self.answer_space!r}")


def scored_suffix(cfg: ProbeConfig) -> str:
    """The text scored after the gold answer: `cfg.answer_suffix` when set, else `answer_end(cfg.zero_cot_prefix)`.

    Derived from the zero-CoT prefix alone, so the truncated-CoT probe (reasoning pre-filled before the
    same prefix, possibly cut inside a brace group) scores the same end as the zero-CoT probe.
    """
    return cfg.answer_suffix if cfg.answer_suffix is not None else answer_end(cfg.zero_cot_prefix)


def scored_continuation(answer: str, cfg: ProbeConfig) -> str:
    """The continuation p_first/p_all score after the zero-CoT prefix: the gold answer, then `scored_suffix`.

    Every place that scores or counts the gold answer after the prefix uses this (the probes'
    score requests, `positions_needed`, the truncation ablation's context fitting).
    """
    return answer + scored_suffix(cfg)


def spaces_answer(cfg: ProbeConfig) -> bool:
    """True when p_first/p_all score both spellings (`probe.answer_space=both`) and the pre-fill does not already
    end with whitespace (after `#### ` the spaced spelling would be a second space: nothing to add)."""
    return cfg.answer_space == "both" and not cfg.zero_cot_prefix[-1:].isspace()


def _head(sc: ScoreResult) -> int:
    """How many of a score's tokens up to the first that carries a visible character (1 when the backend does not
    say its tokens): a tokenizer that writes the space as a token of its own (SmolLM2: " ", "1", "8", "}") gives 2."""
    for i, t in enumerate(sc.tokens):
        if t.strip(_BLANK_MARKS):
            return i + 1
    return 1


# whitespace as tokenizers name it (`convert_ids_to_tokens`): byte-level BPE's space/newline/tab marks, sentencepiece's
_BLANK_MARKS = " \t\n\r\u0120\u010a\u0109\u2581"


def spaced_scores(exact: ScoreResult, spaced: ScoreResult) -> dict[str, Any]:
    """p_first/p_all over the two spellings of the gold answer after the pre-fill, `18}` and ` 18}` (option (a)).

    p_first = P(first token of `18}`) + P(first tokens of ` 18}` up to the first visible one): the probability that
    the model starts the gold answer in either spelling. The two events are disjoint (their first tokens differ,
    one starting with a space), and counting the space variant only up to its first visible character keeps a
    space token of its own (SmolLM2) from adding the mass of every answer written after a space.
    p_all = (P(`18}`) + P(` 18}`))^(1 / n), n the exact spelling's token count: the probability of the whole
    answer in either spelling, per token as p_all is; with no mass on the space it is today's p_all exactly.
    Chosen over (b), ending the pre-fill where the tokenizer wants it, because which spelling a model uses is
    its own choice (16 of 32 SmolLM2 zero-CoT outputs start with a space after `\\boxed{`, 16 do not): scoring
    both reads the model's answer whichever it picks, where one pre-fill would favour one half.
    The fields say what was scored: `scored` (both continuations), `p_first_parts` and `p_all_parts` (per spelling:
    its first-token probability, and its whole probability exp(sum log p)).
    """
    a, b = exact.token_logprobs, spaced.token_logprobs
    first_a, first_b = math.exp(a[0]), math.exp(sum(b[: _head(spaced)]))
    whole_a, whole_b = math.exp(sum(a)), math.exp(sum(b))
    total = whole_a + whole_b
    p_all = math.exp((math.log(total) if total > 0 else -math.inf) / len(a))
    return {"p_first": min(1.0, first_a + first_b), "p_all": min(1.0, p_all), "answer_space": "both",
            "p_first_parts": [first_a, first_b], "p_all_parts": [whole_a, whole_b]}


def answer_score_requests(prompts: Sequence[Prompt], answers: Sequence[str], cfg: ProbeConfig) -> list[ScoreRequest]:
    """One teacher-forced score request per prompt: `scored_continuation(answer, cfg)` after it."""
    return [ScoreRequest(p, scored_continuation(a, cfg)) for p, a in zip(prompts, answers, strict=True)]


def _prefill(cfg: ProbeConfig, backend: Backend) -> bool:
    return cfg.mode == "prefill" or (cfg.mode == "auto" and backend.supports_prefill)


def zero_cot_prompt(question: str, cfg: ProbeConfig, prefill: bool = True) -> Prompt:
    """The forced no-reasoning prompt x^ (pre-filled box, or the API instruction)."""
    user = cfg.user_template.format(question=question)
    if prefill:
        return Prompt(user=user, assistant_prefix=cfg.zero_cot_prefix, system=cfg.system)
    return Prompt(user=f"{user}\n{cfg.api_instruction}", system=cfg.system)


def full_cot_prompt(question: str, cfg: ProbeConfig) -> Prompt:
    """The normal prompt: the model reasons as it likes and ends with \\boxed{}."""
    return Prompt(user=cfg.user_template.format(question=question) + cfg.full_cot_suffix, system=cfg.system)


def full_cot_request(question: str, cfg: ProbeConfig) -> GenerationRequest:
    """The full-CoT generation of one question: `full_cot_prompt`, `cfg.full_cot_max_tokens`, and the stop strings
    of `zcp.probe.conventions.full_cot_stop` (one place for con's pass, the truncation ablation's CoTs and auto's
    reading, so the same question is one request and one generation under every convention)."""
    return GenerationRequest(full_cot_prompt(question, cfg), max_new_tokens=cfg.full_cot_max_tokens,
                             stop=full_cot_stop())


def prompt_rendering(backend: Backend, cfg: ProbeConfig, example: Item | None = None) -> dict[str, Any]:
    """How this run's prompts reach the model, for summary.json and run_meta.json (and printed by detection).

    The backend's own account (`TokenizedBackend.rendering`: the tokenizer's chat template and its hash, or
    the plain template and why; "server" for a chat API), else kind "unrecorded"; plus `probe_mode`
    (`prefill`: the assistant turn pre-filled with the zero-CoT prefix, or `api`: the instruction appended)
    and, given an item, `example_zero_cot`: its zero-CoT prompt exactly as the model sees it.
    """
    info: dict[str, Any] = dict(backend.rendering())
    prefill = _prefill(cfg, backend)
    info["probe_mode"] = "prefill" if prefill else "api"
    if example is not None:
        # a chat API that cannot take it says so when probing, not here; an engine may not say what it renders
        with contextlib.suppress(ValueError, NotImplementedError):
            info["example_zero_cot"] = backend.render(zero_cot_prompt(example.question, cfg, prefill))
    return info


def describe_rendering(info: dict[str, Any]) -> str:
    """One line saying how prompts were rendered (from `prompt_rendering`)."""
    kind = info.get("kind")
    if kind == "chat_template":
        kw = info.get("chat_template_kwargs") or {}
        how = f"the tokenizer's chat template (sha256 {info.get('template_sha256')}" + (f", {kw})" if kw else ")")
    elif kind == "plain_template":
        how = f"the plain template {info.get('template')!r} ({info.get('reason')})"
    elif kind == "server":
        how = f"the server's chat template (endpoint {info.get('endpoint')})"
    else:
        how = f"unrecorded ({info.get('reason')})"
    mode = ("the assistant turn pre-filled with probe.zero_cot_prefix" if info.get("probe_mode") == "prefill"
            else "probe.api_instruction appended to the user turn")
    return f"{how}; zero-CoT: {mode}"


def position_parts(backend: Backend, items: Sequence[Item], cfg: ProbeConfig) -> list[dict[str, Any]] | None:
    """What each item's probe spends the model's positions on; None when the backend cannot count tokens.

    Per item: `zero_cot_prompt` (tokens of the rendered zero-CoT prompt), `zero_cot_tail` and `zero_cot_tail_key`
    (what follows it: the larger of the scored answer and its end, `scored_continuation`, when a metric needing
    log-probs runs (p_first, p_all), and the generation budget `probe.zero_cot_max_tokens` when one needing the
    zero-CoT answer runs (acc, con)), and, when one needs the full-CoT generation (con), `full_cot_prompt`
    (tokens of the full-CoT prompt) and `full_cot_budget` (`probe.full_cot_max_tokens`).
    `needed` is the larger of the two probes' totals; `needed_by` says which one ("zero-CoT" or "full-CoT").
    """
    if not backend.counts_tokens or not items:
        return None if not backend.counts_tokens else []
    count = backend.count_tokens
    prefill = _prefill(cfg, backend)
    z, ans = count([zero_cot_prompt(it.question, cfg, prefill) for it in items],
                   [scored_continuation(it.answer, cfg) for it in items])
    scored, generated = needing(cfg.metrics, "logprobs"), needing(cfg.metrics, "generation")
    full = count([full_cot_prompt(it.question, cfg) for it in items])[0] if needing(cfg.metrics, "full_cot") else None
    parts = []
    for k in range(len(items)):
        tail, key = 0, ""
        if scored:
            tail, key = ans[k], "the scored answer"
        if generated and cfg.zero_cot_max_tokens >= tail:
            tail, key = cfg.zero_cot_max_tokens, f"probe.zero_cot_max_tokens={cfg.zero_cot_max_tokens}"
        part: dict[str, Any] = {"zero_cot_prompt": z[k], "zero_cot_tail": tail, "zero_cot_tail_key": key,
                                "needed": z[k] + tail, "needed_by": "zero-CoT"}
        if full is not None:
            part.update(full_cot_prompt=full[k], full_cot_budget=cfg.full_cot_max_tokens)
            if full[k] + cfg.full_cot_max_tokens > part["needed"]:
                part.update(needed=full[k] + cfg.full_cot_max_tokens, needed_by="full-CoT")
        parts.append(part)
    return parts


def positions_needed(backend: Backend, items: Sequence[Item], cfg: ProbeConfig) -> list[int] | None:
    """Positions each item's probe needs: zero-CoT prompt + max(scored tokens, generation budget), and the
    full-CoT prompt + its budget when a metric needing it (con) runs; the scored tokens are the answer and its end
    (`scored_continuation`). None when the backend cannot count tokens. (`position_parts` gives the parts.)"""
    parts = position_parts(backend, items, cfg)
    return None if parts is None else [p["needed"] for p in parts]


def probe_items(backend: Backend, items: Sequence[Item], cfg: ProbeConfig) -> list[dict[str, Any]]:
    """Per-item probe records for `items`: the fields the metrics of `cfg.metrics` read (`zcp.probe.metrics`).

    The zero-CoT passes (`_answer_metrics`: p_first, p_all, prediction, correct, malformed and any metric's own
    pass), then, when a metric needs it (con), the full-CoT generation (cot_prediction, cot_malformed,
    cot_correct, consistent).
    """
    prefill = _prefill(cfg, backend)
    zprompts = [zero_cot_prompt(it.question, cfg, prefill) for it in items]
    recs: list[dict[str, Any]] = [
        {"id": it.id, "prompt_hash": stable_hash(repr(p)), "gold": it.answer} for it, p in zip(items, zprompts, strict=True)
    ]
    if "convention" in cfg.extra:  # one convention of a multi-convention run (zcp.probe.multiconv): said per record
        for rec in recs:
            rec["convention"] = cfg.extra["convention"]
    _answer_metrics(backend, items, zprompts, recs, cfg, prefill)
    if needing(cfg.metrics, "full_cot"):
        outs = backend.generate([full_cot_request(it.question, cfg) for it in items])
        for rec, it, out in zip(recs, items, outs, strict=True):
            cot, read_in = read_full_cot(out)  # the box first, as ever; else `#### 42`, `The answer is: 42`, ...
            cot_malformed = not is_parsable(cot)
            rec["cot_prediction"] = cot
            if read_in not in BOX_CONVENTIONS:  # absent: read from the box, as ever (records of boxing models unchanged)
                rec["cot_convention"] = read_in
            rec["cot_malformed"] = cot_malformed
            rec["cot_correct"] = (not cot_malformed) and answers_equal(cot, it.answer)
            if "malformed" in rec:  # the zero-CoT answer was generated (a metric needing it runs: con)
                rec["consistent"] = (not rec["malformed"]) and (not cot_malformed) and answers_equal(rec["prediction"], cot)
    return recs


def _answer_metrics(backend: Backend, items: Sequence[Item], prompts: Sequence[Prompt], recs: list[dict[str, Any]],
                    cfg: ProbeConfig, prefill: bool) -> None:
    """Fill p_first/p_all (gold answer and its end scored after each prompt), acc (greedy answer) and the fields
    of metrics with their own pass (`ProbeMetric.probe`) into `recs`; each pass runs when a metric needs it.

    The scored tokens are those of `scored_continuation` (e.g. "50}") tokenised in context after the
    prompt: p_first is the probability of the first of them, p_all exp(mean log p) over all of them, the
    end included. A tokenizer that merges the answer's last character with the brace ("5}" as one token)
    simply makes that merged token one of the scored tokens. Records say what was scored:
    `n_answer_tokens` (the number of scored tokens, answer + end) and `answer_suffix` (the end's text).

    Shared by the zero-CoT probe and the truncated-CoT probe (whose prompts pre-fill part of a chain of
    thought before the same final-answer prefix), so that a cut at r = 0 is the zero-CoT probe exactly.
    """
    scored = needing(cfg.metrics, "logprobs")
    if scored:
        if not prefill or not backend.supports_logprobs:
            need = needing(metric_names(), "logprobs")
            others = [m for m in metric_names() if m not in need]
            raise ValueError(f"{'/'.join(need)} need a backend with pre-fill and log-probabilities; "
                             f"use probe.metrics=[{','.join(others)}] for API models")
        suffix = scored_suffix(cfg)
        answers = [it.answer for it in items]
        scores = backend.score(answer_score_requests(prompts, answers, cfg))
        spaced = None
        if spaces_answer(cfg):  # the same answers with a leading space, in one more score call
            spaced = backend.score(answer_score_requests(prompts, [" " + a.lstrip() for a in answers], cfg))
        for k, (rec, sc) in enumerate(zip(recs, scores, strict=True)):
            lps = sc.token_logprobs
            rec["n_answer_tokens"] = len(lps)
            rec["answer_suffix"] = suffix
            if spaced is None:
                rec["p_first"] = math.exp(lps[0])
                rec["p_all"] = math.exp(sum(lps) / len(lps))
            else:
                rec.update(spaced_scores(sc, spaced[k]))
                rec["scored"] = [scored_continuation(answers[k], cfg), scored_continuation(" " + answers[k].lstrip(), cfg)]
    if needing(cfg.metrics, "generation"):
        # a box pre-fill stops where the box closes; a line convention (`#### `, `The answer is `) at the line's end
        box = prefill and opens_group(cfg.zero_cot_prefix)
        stop = zero_cot_stop(cfg.zero_cot_prefix) if prefill else ()
        outs = backend.generate([
            GenerationRequest(p, max_new_tokens=cfg.zero_cot_max_tokens, stop=stop, stop_at_box_close=box)
            for p in prompts
        ])
        end = scored_suffix(cfg)
        for rec, it, out in zip(recs, items, outs, strict=True):
            pred = extract_after_prefill(out, cfg.zero_cot_prefix, end) if prefill else extract_boxed(out)
            malformed = not is_parsable(pred)
            rec["raw_output"] = out
            rec["prediction"] = pred
            rec["malformed"] = malformed
            rec["correct"] = (not malformed) and answers_equal(pred, it.answer)
    for name in cfg.metrics:
        own = get_metric(name).probe
        if own is not None:
            own(backend, items, prompts, recs, cfg, prefill)


# ---------------------------------------------------------------- truncated chain of thought (paper Figure 2)

_SENTENCE_END = re.compile(r"[.!?;]\s")
TRUNCATION_UNITS = ("auto", "tokens", "words")


def strip_final_answer(cot: str) -> str:
    """The reasoning of a full-CoT output without its stated final answer.

    Drops the line holding the last `\\boxed{` (e.g. ``The final answer is: \\[ \\boxed{25} \\]``) and
    everything after it, so that r = 1 of the truncation curve is the whole reasoning with the answer
    left for the probe to produce. When that line is the output's only line, the cut falls at the start
    of the sentence holding the box (or at the box itself). An output without a box (cut by the token
    budget) is all reasoning and is kept whole; trailing whitespace is removed.
    """
    starts = [cot.rfind(op) for op in BOX_OPENERS]
    at = max(starts)
    if at < 0:
        return cot.rstrip()
    line_start = cot.rfind("\n", 0, at) + 1
    if cot[:line_start].strip():
        return cot[:line_start].rstrip()
    ends = [m.end() for m in _SENTENCE_END.finditer(cot, 0, at)]
    return cot[: ends[-1] if ends else at].rstrip()


def truncation_unit(backend: Backend, unit: str = "auto") -> str:
    """`tokens` when the backend exposes a tokenizer (and unit is auto or tokens), else `words`."""
    if unit not in TRUNCATION_UNITS:
        raise ValueError(f"truncation unit must be one of {list(TRUNCATION_UNITS)}, not {unit!r}")
    has_tok = backend.tokenizer is not None
    if unit == "tokens" and not has_tok:
        raise ValueError("truncation unit 'tokens' needs a backend with a tokenizer (e.g. HFBackend); use words")
    return "tokens" if has_tok and unit != "words" else "words"


def cut_points(text: str, backend: Backend | None = None, unit: str = "words") -> list[int]:
    """Character offsets after each unit of `text`: after each token (the backend's tokenizer, offsets
    mapping) or each whitespace-separated word; cutting at point k keeps the first k units verbatim."""
    if not text:
        return []
    if unit == "tokens":
        tok = backend.tokenizer  # type: ignore[union-attr]
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ends = sorted({int(e) for _, e in enc["offset_mapping"] if e > 0})
        if not ends or ends[-1] != len(text):
            ends.append(len(text))
        return ends
    return [m.end() for m in re.finditer(r"\S+", text)]


def truncate_reasoning(text: str, ratio: float, points: Sequence[int]) -> tuple[str, int, int]:
    """The first round(ratio x n) of the n units of `text` (points from `cut_points`); returns the kept
    text, the units kept and n. ratio 0 keeps nothing, ratio 1 everything."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"truncation ratio must be in [0, 1], not {ratio}")
    n = len(points)
    k = math.floor(ratio * n + 0.5)
    return (text[: points[k - 1]] if k else ""), k, n


def truncated_cot_prompt(question: str, reasoning: str, cfg: ProbeConfig) -> Prompt:
    """The zero-CoT prompt with `reasoning` pre-filled before the final-answer prefix (a newline between
    them); with no reasoning it is exactly `zero_cot_prompt(question, cfg)`."""
    lead = reasoning.rstrip()
    prefix = (lead + "\n" if lead else "") + cfg.zero_cot_prefix
    return Prompt(user=cfg.user_template.format(question=question), assistant_prefix=prefix, system=cfg.system)


def generate_cots(backend: Backend, items: Sequence[Item], cfg: ProbeConfig) -> list[str]:
    """The model's own greedy full-CoT output per item (full_cot_prompt, full_cot_max_tokens), one batch."""
    return backend.generate([full_cot_request(it.question, cfg) for it in items])


def probe_truncated(backend: Backend, items: Sequence[Item], reasoning: Sequence[str], cfg: ProbeConfig
                    ) -> list[dict[str, Any]]:
    """Probe records (acc via `correct`, p_first, p_all) with each item's (truncated) reasoning pre-filled
    before the final-answer prefix: one score and one generate call for all items. With empty reasoning
    the records equal `probe_items` on the same items (same prompts, same prompt hashes)."""
    if not backend.supports_prefill:
        raise ValueError("the truncated-CoT probe pre-fills the assistant turn: the backend must support pre-fill")
    prompts = [truncated_cot_prompt(it.question, r, cfg) for it, r in zip(items, reasoning, strict=True)]
    recs: list[dict[str, Any]] = [
        {"id": it.id, "prompt_hash": stable_hash(repr(p)), "gold": it.answer} for it, p in zip(items, prompts, strict=True)
    ]
    _answer_metrics(backend, items, prompts, recs, cfg, True)
    return recs
