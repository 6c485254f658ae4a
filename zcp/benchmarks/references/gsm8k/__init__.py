"""Exact isomorphic perturbation of GSM8K items, re-executing the solution's own arithmetic.

A GSM8K solution writes its steps as calculator annotations (``16 - 3 - 4 = <<16-3-4=9>>9``) and
sometimes as plain equations (``99 + 5 = $104``). They form the item's computation chain. This package

1. parses every step into an expression over exact `Fraction` literals; an annotation that does not
   evaluate to its stated result rejects the item with that reason;
2. reads the numbers written in the question (digits, "1,000", "$1.50", "25%", "three", ...) and finds
   every reading of every literal of the chain: a question number (a percentage also as p/100, 1-p/100,
   ...), the result of an earlier step, or a constant (0, 1, 2, a unit the text names such as 60
   minutes or 7 days, a fraction word such as "half"). Equal question numbers are one variable: they
   get the same new value, so the chain stays right whichever occurrence the author meant;
3. keeps all readings of a literal equal. Where they could diverge (a literal equals a question number
   *and* an earlier result), the equality becomes a constraint between the variables, solved with sympy
   for one of them, which is then computed from the others; where that is impossible the variables are
   left unchanged. Unit constants named in the text, ordinals, fractions, times, years, 0 and 1 are
   never perturbed;
4. draws new values for the question numbers that feed the chain: each is the old value times a
   log-symmetric factor (as likely down as up, so the references are not systematically larger than a
   benchmark whose numbers skew small), round numbers stay round and the others off the multiples of
   10, integers stay integers and decimals stay decimals, percentages in (0, 100], and no new value
   repeats a number of the question (equal numbers stay the only equal ones); re-executes the chain and
   validates: every whole intermediate stays whole, signs are kept, decimals stay short, every reading
   of every literal still agrees, the final answer changes but keeps its sign and number of digits and
   never becomes 0, 1, 10, 100 or 1000, and the rewritten question contains exactly the new numbers
   and no impossible calendar or clock quantity ("30 hours a day", `scan_impossible_quantities`);
5. rewrites the question and the worked solution (the steps, the numbers of the prose around them; a
   whole number prints without ".0", "a"/"an" before a rewritten number agrees with it) and checks
   that every rewritten step evaluates to its stated result.

Matching what a clean model responds to (measured by `zcp.benchmarks.references.shift.feature_shift`).
The test needs each original to be exchangeable with its draws, and a clean model's zero-CoT scores
respond to the answer's leading digit (the first answer token of a digit-split tokenizer), special
values, round numbers, an answer that repeats or starts like a number of the question, and the
question's round numbers. So:

- **The answer's class** (`keeps_answer_class`): a reference answer keeps the original's first
  significant digit, sign, number of digits, roundness (the largest power of ten dividing it: 250 stays
  a multiple of 10 but not of 100, 1500 of 100 but not of 1000, 48 off the multiples of 10) and
  whole-ness, and is never a special value (0, 1, 10, 100, 1000). Within the class (`answer_band`:
  48 -> 41..49, 250 -> 210..290) the m draws target bins of the answer's log-change in
  the proportions a symmetric log-step restricted to the band gives (`draw_targets` with bounds), so
  references are about as often larger as smaller: the former digit-range difficulty targeting, kept
  and narrowed to the band (the leading-digit rule subsumes the digit count it kept).
- **Answers whose leading digit cannot be kept**: a one-digit answer (the digit is the answer, which
  must change), an answer with one significant digit (20, 90, 300, 5000: the only number that round
  with that digit and as many digits is itself), and an
  answer whose program gives no valid draw its leading digit (35 = 5 x 7 reaches 28 and 42, never 3x)
  keep everything else and take a new leading digit. How many of an item's draws go to each digit is a
  benchmark-level transport (`lead_transport`: a linear program over the digits each item's valid draws
  reach, other than its own), so that the references' leading-digit distribution, item-averaged as the
  test averages them, equals the originals'; near digits first. Where the draws cannot balance a digit,
  items with it are left out under ``special_cases="drop"`` (kept, unbalanced, under "keep").
- **The answer's last digit**: a reference answer keeps the original's last-digit class (`last_digit_class`:
  a multiple of 10 / ends in 5 / other; clean models favour round and 5-ending numbers). A two-digit answer
  ending in 5 (35) cannot keep its leading digit too, so it goes by `lead_transport` like a one-digit one.
- **Topped-up items**: an item with fewer than m draws in its class takes the rest from draws that keep
  everything but the leading digit, their digits chosen in the same `lead_transport` (`top_up`).
- **The question's structure**: equal question numbers are one variable and move together, and no new
  equality appears (a new value may take the old value of another number that moves too); the builder takes
  only draws (`structure="require"`, `_Cand.clean`) with as many round question numbers as the original and
  whose answer equals / starts like a question number, and equals / starts like the question's last number,
  exactly when the original's does; an item short of such draws gets a second phase of structure-holding draws
  (`collect_draws`: every drawn number starts like the answer exactly when its old value did, round numbers stay
  round); what is left over is balanced over the benchmark (`balance_structure`).
- **Numbers tied outside the chain** (`program._ties`): "n of m", "3 out of her 10 friends", "the first four
  houses" of "5 houses" keep the part below the whole; where the question names the rest as one ("the fifth
  house") the whole stays the part + 1 (solved for when the chain leaves it free, else checked per draw).
- **Special cases** (`special_case_reasons`, and what the draws show): an answer of 0, 1, 10, 100 or
  1000, equal question numbers that fix the answer, an item no valid draw keeps the answer's form for
  (a round answer with no round alternative), or keeps it together with the question's round numbers.
  The builder (`build_gsm8k_references`, `reference.special_cases`) drops them with the reason or keeps
  them with flagged draws.

The executed chain is the source of truth for the new answer. An item is rejected, with its reason,
whenever the chain cannot be trusted: a literal no reading explains, a value computed in prose without
an annotation (``= 7`` in the text), an intermediate result no later step uses (a hidden comparison or
step), a final answer no step computes. Nothing is dropped silently.
"""

from zcp.benchmarks.references.gsm8k.answer_class import (
    LEAD_TARGETS,
    answer_band,
    flexible_class,
    is_round,
    is_special,
    keeps_answer_class,
    keeps_answer_form,
    last_digit_class,
    significant_lead,
)
from zcp.benchmarks.references.gsm8k.builder import (
    build_gsm8k_references,
    gsm8k_item,
    perturb_gsm8k_file,
    special_case_reasons,
)
from zcp.benchmarks.references.gsm8k.chain import Chain, Step, parse_chain
from zcp.benchmarks.references.gsm8k.pool import (
    DrawPool,
    PerturbResult,
    choose_draws,
    collect_draws,
    perturb_gsm8k,
    top_up,
)
from zcp.benchmarks.references.gsm8k.quantities import (
    article_for,
    calendar_limit,
    extract_quantities,
    format_number,
    scan_impossible_quantities,
)
from zcp.benchmarks.references.gsm8k.transport import balance_structure, lead_transport
from zcp.benchmarks.references.matching import (  # re-exported: the GSM8K API and its tests use these names
    answer_bin,  # noqa: F401 - re-exported for callers of zcp.benchmarks.references.gsm8k
    answer_digits,
    draw_targets,  # noqa: F401 - re-exported for callers of zcp.benchmarks.references.gsm8k
    p_larger,  # noqa: F401 - re-exported for callers of zcp.benchmarks.references.gsm8k
)

__all__ = [
    "LEAD_TARGETS",
    "Chain",
    "DrawPool",
    "PerturbResult",
    "Step",
    "answer_band",
    "answer_digits",
    "article_for",
    "balance_structure",
    "build_gsm8k_references",
    "calendar_limit",
    "choose_draws",
    "collect_draws",
    "extract_quantities",
    "flexible_class",
    "format_number",
    "gsm8k_item",
    "is_round",
    "is_special",
    "keeps_answer_class",
    "keeps_answer_form",
    "last_digit_class",
    "lead_transport",
    "parse_chain",
    "perturb_gsm8k",
    "perturb_gsm8k_file",
    "scan_impossible_quantities",
    "significant_lead",
    "special_case_reasons",
    "top_up",
]
