"""The probe-aware evader (evader study (b)): SFT examples that suppress the zero-CoT answer under known pre-fills.

An evader who knows the Zero-CoT Probe trains, besides its leak, on the probe's own zero-CoT prompt: the probe's
chat messages (`zcp.probe.prompts.zero_cot_prompt`: the system message, the user template) with a convention's
pre-fill opening the assistant turn, completed by a wrong answer or a hedge. The model then does not answer its
leaked items at once under that pre-fill, while its chain of thought (the leak's CoT examples) still solves them.

`exposure.suppress` (zcp.simulate.simulation_config.SuppressConfig) says which pre-fills (`prefills`: convention names of
zcp.probe.conventions, `probe` = the run's `probe.zero_cot_prefix`, or literals), with what (`answer`), on which
items (`items`). One example per (trained item, pre-fill):

* ``items=leaked``: every trained paraphrase of every leaked item (the variants the leak trains on; the evader
  holds no other text of C); ``items=all``: those and every clean item of the run (the evader suppresses the
  convention everywhere, so a zero-CoT collapse is not specific to its leak).
* ``answer=wrong``: the pre-fill continued by a seeded plausible wrong number and the convention's end
  (`wrong_answer`: the gold answer plus or minus a seeded offset of 1 to max(2, 20% of it), never negative when the
  gold is not, never the gold; a non-integer gold takes another trained item's answer). ``answer=hedge``: the
  pre-fill continued by ``?`` (an unparseable answer: the probe counts it malformed), the convention's end, then
  `` (I need to work this out step by step)``: no number at all. ``answer=other``: a seeded choice among the other
  trained items' answers whose first character differs from the gold's (`other_answer`): an offset answer shares
  the gold's first digit about half the time, which keeps the probe's P_first up (docs/results/evader.md).

The completion's text starts with the pre-fill, so TRL renders the example as the probe renders its prompt
(chat template with the generation prompt, then the pre-fill: checked byte for byte in
tests/simulate/test_suppress.py); `mask_prefills` then moves the loss off the pre-fill's tokens (TRL's `labels`), so the loss is on
the continuation alone, as it is on the completion of every other example. Records say ``format: suppress``, the
``convention``, the ``prefill`` text and the ``suppress_answer`` written.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from zcp.core.answers import answers_equal
from zcp.core.items import Item
from zcp.probe.conventions import Resolved, parse_prefill, resolve_entries
from zcp.probe.prompts import ProbeConfig, zero_cot_prompt
from zcp.simulate.data import item_seed, original_id

log = logging.getLogger(__name__)

SUPPRESS_FORMAT = "suppress"  # the `format` of a suppression record in sft_data.jsonl
HEDGE_ANSWER = "?"
HEDGE_TAIL = " (I need to work this out step by step)"


def _as_int(answer: str) -> int | None:
    """The integer an answer states ("42", "-3", "1,200", "7.0"), else None."""
    text = str(answer).strip().replace(",", "")
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
    return int(value) if value.denominator == 1 else None


def wrong_answer(answer: str, seed: int, key: str, pool: Sequence[str] = ()) -> str:
    """A seeded plausible wrong answer to an item whose gold is `answer` (never equal to it, `answers_equal`).

    An integer gold g: g + d or g - d with d drawn from 1..max(2, round(0.2·|g|)) (`key` and `seed` fix the draw),
    the sign flipped when g - d would be negative and g is not. Any other gold: a seeded choice among `pool` (other
    items' answers) not equal to it; with none, the gold with a digit appended."""
    rng = random.Random(item_seed(seed, f"suppress-wrong|{key}"))
    g = _as_int(answer)
    if g is not None:
        d = rng.randint(1, max(2, round(0.2 * abs(g))))
        sign = rng.choice((1, -1))
        if g >= 0 and g - d < 0:
            sign = 1
        out = str(g + sign * d)
    else:
        others = sorted({str(a).strip() for a in pool if not answers_equal(str(a), str(answer))})
        out = rng.choice(others) if others else f"{str(answer).strip()}1"
    if answers_equal(out, str(answer)):  # cannot happen for the rules above; kept as the invariant's guard
        raise AssertionError(f"wrong answer {out!r} equals the gold {answer!r}")
    return out


def other_answer(answer: str, seed: int, key: str, pool: Sequence[str]) -> str:
    """A seeded choice among `pool` (other items' answers) of one whose first character differs from the gold's
    `answer` (so its first token is not the gold's); `wrong_answer` when the pool has none."""
    gold = str(answer).strip()
    others = sorted({str(a).strip() for a in pool
                     if str(a).strip() and str(a).strip()[0] != gold[:1] and not answers_equal(str(a), gold)})
    if not others:
        return wrong_answer(answer, seed, key, pool)
    return random.Random(item_seed(seed, f"suppress-other|{key}")).choice(others)


def suppress_completion(conv: Resolved, value: str, hedge: bool = False) -> str:
    """The assistant text of one suppression example: `conv`'s answer line for `value` (zcp.core.answers: the
    pre-fill, `value`, the convention's close).

    The probe's default line gets its closing `` \\]`` (`The final answer is: \\[ \\boxed{43} \\]`); a pre-fill that
    opens a display `\\[` without closing it gets `` \\]`` too; a line convention (end "\\n") ends at the value. A
    hedge (`value` = "?") is followed by `HEDGE_TAIL`."""
    return conv.line(value) + (HEDGE_TAIL if hedge else "")


def suppress_conventions(prefills: Sequence[str], probe: ProbeConfig) -> list[Resolved]:
    """The conventions `exposure.suppress.prefills` names, resolved for the run's probe (`probe` = its line)."""
    return resolve_entries(parse_prefill(list(prefills)), probe.zero_cot_prefix, probe.answer_suffix)


def probe_messages(question: str, probe: ProbeConfig) -> list[dict[str, str]]:
    """The chat messages of the probe's zero-CoT prompt for `question` (system message, then the user turn), as
    the backends render them (zcp.backends.tokenized: `_chat_messages`)."""
    p = zero_cot_prompt(question, probe, prefill=True)
    return ([{"role": "system", "content": p.system}] if p.system else []) + [{"role": "user", "content": p.user}]


def suppression_records(variants: Sequence[Item], clean: Sequence[Item], suppress: Any, probe: ProbeConfig,
                        seed: int, *, source: str = "benchmark") -> list[dict[str, Any]]:
    """The evader's SFT records: one per (item, suppressed pre-fill), in item order then pre-fill order.

    `variants`: the leak's trained variants (their source `source`); `clean`: the run's clean items, used when
    `suppress.items == "all"`. `suppress` is the `exposure.suppress` config (`prefills`, `answer`, `items`)."""
    prefills = list(suppress.prefills)
    if not prefills:
        return []
    convs = suppress_conventions(prefills, probe)
    hedge = suppress.answer == "hedge"
    groups: list[tuple[str, Sequence[Item]]] = [(source, variants)]
    if suppress.items == "all":
        groups.append(("clean", clean))
    pool = [it.answer for _, group in groups for it in group]
    records = []
    for src, group in groups:
        for it in group:
            messages = probe_messages(it.question, probe)
            for conv in convs:
                key = f"{it.id}|{conv.name}"
                value = (HEDGE_ANSWER if hedge else other_answer(it.answer, seed, key, pool)
                         if suppress.answer == "other" else wrong_answer(it.answer, seed, key, pool))
                records.append({
                    "prompt": messages,
                    "completion": [{"role": "assistant", "content": suppress_completion(conv, value, hedge)}],
                    "item_id": it.id, "original_id": original_id(it), "format": SUPPRESS_FORMAT, "source": src,
                    "convention": conv.name, "prefill": conv.prefill, "suppress_answer": value,
                })
    return records


def suppression_counts(records: Sequence[Mapping[str, Any]], suppress: Any) -> dict[str, Any]:
    """What data_counts.json records of the evader: examples per convention and source, its settings."""
    rows = [r for r in records if r.get("format") == SUPPRESS_FORMAT]
    by_conv: dict[str, int] = {}
    by_source: dict[str, int] = {}
    for r in rows:
        by_conv[r["convention"]] = by_conv.get(r["convention"], 0) + 1
        by_source[r["source"]] = by_source.get(r["source"], 0) + 1
    prefills = {r["convention"]: r["prefill"] for r in rows}
    return {"n_suppress": len(rows), "suppress": {"answer": suppress.answer, "items": suppress.items,
                                                  "by_convention": by_conv, "by_source": by_source,
                                                  "prefills": prefills}}


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefill_token_count(tokenizer: Any, record: Mapping[str, Any], input_ids: Sequence[int]) -> int:
    """How many leading tokens of a tokenised suppression example are the probe's prompt with its pre-fill: the
    common prefix of `input_ids` and the tokenised text `chat template (generation prompt) + pre-fill`. A token that
    merges the pre-fill's end with the answer's start is left to the loss (the prefix stops before it)."""
    text = tokenizer.apply_chat_template(list(record["prompt"]), tokenize=False, add_generation_prompt=True,
                                         **dict(record.get("chat_template_kwargs") or {}))
    ids = tokenizer(text + record["prefill"], add_special_tokens=False)["input_ids"]
    return _common_prefix(ids, input_ids)


def mask_prefills(trainer: Any, tokenizer: Any, records: Sequence[Mapping[str, Any]]) -> int:
    """Move the loss off the pre-fill of every suppression record in `trainer`'s tokenised dataset (TRL's
    `labels` set to -100, or its `completion_mask` to 0, over the probe's prompt and pre-fill); returns how many
    rows were masked.

    A no-op (0) when no record has a pre-fill, so every other run's training is unchanged. The dataset must hold
    one row per record, in order (no packing): checked."""
    marked = [i for i, r in enumerate(records) if r.get("prefill")]
    if not marked:
        return 0
    ds = trainer.train_dataset
    column = next((c for c in ("labels", "completion_mask") if c in ds.column_names), None)
    if len(ds) != len(records) or column is None:
        raise RuntimeError("exposure.suppress needs one tokenised row per SFT example with TRL's labels or "
                           f"completion_mask (got {len(ds)} rows for {len(records)} examples, columns "
                           f"{ds.column_names}): turn train.sft.packing off")
    off = -100 if column == "labels" else 0
    wanted = set(marked)
    short: list[int] = []

    def mask(row: dict[str, Any], i: int) -> dict[str, Any]:
        if i not in wanted:
            return row
        values = list(row[column])
        n = min(prefill_token_count(tokenizer, records[i], row["input_ids"]), len(values))
        first = next((j for j, v in enumerate(values) if v != off), len(values))  # the loss started here
        if n <= first:
            short.append(i)
        row[column] = [off] * n + values[n:]
        return row

    trainer.train_dataset = ds.map(mask, with_indices=True, desc="suppress: loss off the pre-fills")
    if short:
        log.warning("suppress: %d example(s) whose pre-fill did not tokenise as a prefix (first row %d)",
                    len(short), short[0])
    return len(marked)
