"""What a detection record of a planned unit must say it was made with, and the check of a record against it.

A record is located by its unit (split, variant, original_id, draw: `zcp.core.rundir.detection_unit`), but what it
holds depends on more: the zero-CoT prompt (its `prompt_hash`: the question as planned, possibly cut by
data.on_overflow=truncate, the template, the pre-filled prefix of the convention), the gold answer it scored
(`gold`), the text scored after it (`answer_suffix`) and, in a multi-convention run, the convention (`convention`).
A row made under another configuration (copied in, left by an older run, a shard of another plan) has the same
unit and other scores; kept, it changes the verdict. `planned_fields` says what each planned unit's record must
carry, computed from the prompts alone (no model runs); `unit_mismatch` is the check a `RecordStore.load(expect=)`
(a resume: the row is dropped and probed again) and the shard merge (refused) apply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zcp.core.io import stable_hash
from zcp.core.items import Item
from zcp.core.rundir import detection_unit
from zcp.probe.prompts import ProbeConfig, _prefill, scored_suffix, zero_cot_prompt

Unit = tuple[str, str, str, int]
CHECKED = ("prompt_hash", "gold", "answer_suffix", "convention")  # what a record says it was made with


def expected_record(item: Item, probe: ProbeConfig, prefill: bool) -> dict[str, Any]:
    """The fields a record of `item` probed with `probe` carries (as `zcp.probe.prompts.probe_items` writes them):
    prompt_hash, gold, answer_suffix (when a scored metric runs: checked only where the record has it) and
    convention (None outside a multi-convention run)."""
    return {"prompt_hash": stable_hash(repr(zero_cot_prompt(item.question, probe, prefill))), "gold": item.answer,
            "answer_suffix": scored_suffix(probe), "convention": probe.extra.get("convention")}


def planned_fields(units: Sequence[tuple[Unit, Item]], backend: Any, probe: ProbeConfig,
                   prefill: bool | None = None) -> dict[Unit, dict[str, Any]]:
    """Per planned unit (`zcp.probe.detect.plan_units`), the fields its record must carry. `prefill`: whether the
    zero-CoT prompt is pre-filled (None: as the probe decides for `backend`: probe.mode, or the backend's support)."""
    if prefill is None:
        prefill = _prefill(probe, backend)
    return {key: expected_record(it, probe, prefill) for key, it in units}


def unit_mismatch(planned: dict[Unit, dict[str, Any]]) -> Callable[[dict[str, Any]], str | None]:
    """The check of a record against its planned unit: None when it matches (or is of no planned unit), else one
    line naming the unit and the first field that differs (the record's value, then the planned one)."""

    def why(rec: dict[str, Any]) -> str | None:
        try:
            key = detection_unit(rec)
        except (KeyError, TypeError, ValueError):
            return "a record without its unit (split, variant, original_id, draw)"
        want = planned.get(key)
        if want is None:
            return None
        for name in CHECKED:
            if name == "answer_suffix" and name not in rec:  # written only when a scored metric ran
                continue
            if rec.get(name) != want[name]:
                show = str if name == "prompt_hash" else repr
                return (f"unit {key} was made with {name} {show(rec.get(name))}, this run plans {name} "
                        f"{show(want[name])}")
        return None

    return why
