"""A rule-based paraphraser for real word problems (GSM8K style): new surface, same numbers and logic.

Each variant combines, chosen at random per variant (seeded):

- person names swapped consistently in question and solution (same gender, so pronouns stay right);
- synonyms from a small curated table (word-problem vocabulary only);
- number words for small numbers ("3" -> "three") or back ("three" -> "3"): values never change;
- the order of two adjacent context sentences, only when the later one does not refer back to the
  earlier one (no pronoun or anaphoric word), and never moving the question, which stays last;
- a reworded question opening ("Calculate" -> "Find", "How many" -> "What number of");
- another notation for the same values (25% -> 25 percent, $5 -> 5 dollars, 1,000 -> 1000, contractions);
- two adjacent context sentences joined with ", and".

The tables are hand-written on purpose: general thesaurus packages (WordNet) are context-blind ("gets
better" -> "receives better") and would need a corpus download; a short list of substitutions that are
safe in this genre is both more reliable and reviewable.
"""

from __future__ import annotations

import random
import re

from zcp.benchmarks.paraphrase.base import Candidate, Paraphraser, register_paraphraser
from zcp.core.io import stable_hash
from zcp.core.items import Item

FEMALE_NAMES = (
    "Janet", "Mary", "Anna", "Emma", "Olivia", "Sophia", "Mia", "Ava", "Lily", "Chloe", "Zoe", "Ella",
    "Nora", "Lucy", "Hannah", "Sarah", "Laura", "Julia", "Emily", "Rachel", "Megan", "Kate", "Amy", "Linda",
    "Susan", "Karen", "Betty", "Helen", "Alice", "Clara", "Maya", "Leah", "Nina", "Sofia",
    "Jenna", "Carla", "Paula", "Diana", "Fiona", "Gina", "Tina", "Wendy", "Jane", "Jill", "Kelly", "Melanie",
    "Sandra", "Tracy", "Vanessa", "Bella", "Maria", "Rita", "Eva", "Elena", "Isabel", "Martha", "Carol",
)
MALE_NAMES = (
    "John", "James", "Tom", "Jack", "Ben", "Sam", "Max", "Leo", "Noah", "Liam", "Ethan", "Mason", "Lucas",
    "Henry", "Oliver", "Adam", "David", "Daniel", "Michael", "Paul", "Peter", "Robert", "Steve", "Tony",
    "Mike", "Joe", "George", "Harry", "Kevin", "Brian", "Eric", "Ryan", "Jason", "Kyle",
    "Carlos", "Diego", "Omar", "Ali", "Ivan", "Hugo", "Felix", "Oscar", "Victor", "Simon", "Colin", "Dean",
    "Greg", "Josh", "Luke", "Matt", "Nick", "Owen", "Ted", "Tim", "Wade", "Bobby", "Billy",
)

# (pattern, replacements): whole words, case kept. Only substitutions that are safe in word problems.
SYNONYMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("buys", ("purchases",)), ("buy", ("purchase",)), ("bought", ("purchased",)), ("buying", ("purchasing",)),
    ("store", ("shop",)), ("stores", ("shops",)), ("wants to", ("would like to", "wishes to")),
    ("decides to", ("chooses to",)), ("decided to", ("chose to",)), ("needs to", ("has to",)),
    ("children", ("kids",)), ("kids", ("children",)), ("altogether", ("in total", "in all")),
    ("in total", ("altogether", "in all")), ("every day", ("each day", "daily")), ("each day", ("every day",)),
    ("per day", ("a day", "each day")), ("per week", ("a week", "each week")), ("per hour", ("an hour",)),
    ("large", ("big",)), ("big", ("large",)), ("receives", ("gets",)), ("received", ("got",)),
    ("begins", ("starts",)), ("began", ("started",)), ("earns", ("makes",)), ("earned", ("made",)),
    ("costs", ("is priced at",)), ("amount of", ("quantity of",)), ("friends", ("pals",)),
    ("money", ("cash",)), ("remaining", ("left over",)), ("twice as many", ("two times as many",)),
    ("twice as much", ("two times as much",)), ("finished", ("completed",)), ("finishes", ("completes",)),
    ("started", ("began",)), ("starts", ("begins",)), ("collects", ("gathers",)), ("collected", ("gathered",)),
    ("travels", ("goes",)), ("quickly", ("fast",)), ("tries to", ("attempts to",)), ("is able to", ("can",)),
    ("afterwards", ("later",)), ("students", ("pupils",)), ("teacher", ("instructor",)), ("car", ("vehicle",)),
    ("shirts", ("tops",)), ("farm", ("ranch",)),
)
QUESTION_OPENINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Calculate", ("Find", "Determine", "Work out")), ("Find", ("Determine", "Calculate", "Work out")),
    ("Determine", ("Find", "Calculate")), ("What is", ("What's",)), ("How many", ("What number of",)),
)
_ANAPHORA = re.compile(
    r"\b(he|she|they|it|him|her|them|his|their|its|this|that|these|those|then|after|afterwards|later|next|"
    r"also|too|again|same|remaining|rest|left|more|less|fewer|another|other|others|each|both|than|such|"
    r"so|but|however|instead|now|finally|if|when)\b", re.IGNORECASE)
_LOWERCASE_STARTERS = frozenset(
    ["The", "A", "An", "He", "She", "They", "It", "His", "Her", "Their", "Its", "This", "That", "These", "Those", "Each", "Every", "There", "In", "On", "At", "After", "If", "When", "Then", "One", "Some", "All", "Both", "Each", "Another", "Most", "Half", "We", "You", "Our", "Your"])
_SMALL = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
_SMALL_INV = {v: k for k, v in _SMALL.items()}


def _case_like(word: str, like: str) -> str:
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _sub_word(text: str, pattern: str, repl: str) -> str:
    return re.sub(rf"\b{re.escape(pattern)}\b", lambda m: _case_like(repl, m.group(0)), text, flags=re.IGNORECASE)


def names_in(text: str) -> list[str]:
    """Known first names in `text`, in order of appearance."""
    found: list[str] = []
    for m in re.finditer(r"\b[A-Z][a-z]+\b", text):
        if (m.group(0) in FEMALE_NAMES or m.group(0) in MALE_NAMES) and m.group(0) not in found:
            found.append(m.group(0))
    return found


def swap_names(texts: list[str], rng: random.Random) -> tuple[list[str], dict[str, str]]:
    """Replace every known name by another of the same gender, consistently across `texts`."""
    present = [n for t in texts for n in names_in(t)]
    taken = set(present)
    mapping: dict[str, str] = {}
    for name in dict.fromkeys(present):
        pool = [n for n in (FEMALE_NAMES if name in FEMALE_NAMES else MALE_NAMES) if n not in taken]
        if not pool:
            continue
        new = rng.choice(pool)
        mapping[name] = new
        taken.add(new)
    out = []
    for t in texts:
        if mapping:
            t = re.sub(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b", lambda m: mapping[m.group(0)], t)
        out.append(t)
    return out, mapping


def numbers_to_words(text: str, rng: random.Random, p: float = 1.0) -> str:
    """Write standalone integers 2..10 as words (never money, percentages, decimals, fractions, times)."""
    def repl(m: re.Match[str]) -> str:
        s, e = m.start(), m.end()
        if text[max(0, s - 1):s] in ("$", ".", ",", "/", ":", "-") or rng.random() > p:
            return m.group(0)
        if re.match(r"\s?(percent|%)|\s\d+/\d", text[e:e + 9]):
            return m.group(0)
        word = _SMALL[int(m.group(0))]
        at_start = not text[:s].strip() or text[:s].rstrip()[-1:] in ".!?"
        return word.capitalize() if at_start else word
    return re.sub(r"(?<![\w.$])(?:[2-9]|10)(?![\w.%,/:]|\.\d)", repl, text)


def words_to_numbers(text: str, rng: random.Random, p: float = 1.0) -> str:
    """Write the words two..ten as digits (not inside compounds like "twenty-two" or "one-third")."""
    def repl(m: re.Match[str]) -> str:
        if rng.random() > p:
            return m.group(0)
        return str(_SMALL_INV[m.group(0).lower()])
    return re.sub(r"(?<![\w-])(two|three|four|five|six|seven|eight|nine|ten)(?![\w-])", repl, text, flags=re.IGNORECASE)


def split_sentences(text: str) -> list[str]:
    """Sentences of a problem (a period inside a number such as $1.50 does not split)."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z\"'])", text.strip())
    return [p for p in parts if p]


def _subject(sentence: str) -> str:
    words = sentence.split()
    skip = 1 if words and words[0].lower() in ("the", "a", "an", "each", "every", "one") else 0
    return " ".join(words[skip:skip + 1]).lower().strip(",")


def swap_safe_sentences(text: str, rng: random.Random) -> str | None:
    """Swap two adjacent context sentences where the later one does not refer back; None if no safe pair."""
    sents = split_sentences(text)
    if len(sents) < 3:
        return None
    body, last = sents[:-1], sents[-1]
    if not last.rstrip().endswith("?") and "?" in "".join(body):
        return None  # the question is not the last sentence: leave the order alone
    # the later sentence must not refer back, and the two must be about different subjects (two facts
    # about different things commute; two events of the same actor may not: "Tom had 5. Tom ate 2.")
    pairs = [i for i in range(len(body) - 1)
             if not _ANAPHORA.search(body[i + 1]) and not body[i + 1].rstrip().endswith("?")
             and not body[i].rstrip().endswith("?") and _subject(body[i]) != _subject(body[i + 1])]
    if not pairs:
        return None
    i = rng.choice(pairs)
    body[i], body[i + 1] = body[i + 1], body[i]
    return " ".join([*body, last])


def synonyms(text: str, rng: random.Random, p: float = 0.7) -> str:
    """Replace table words by a synonym, each table entry with probability `p`."""
    for pattern, repls in SYNONYMS:
        if rng.random() < p and re.search(rf"\b{re.escape(pattern)}\b", text, re.IGNORECASE):
            text = _sub_word(text, pattern, rng.choice(repls))
    return text


_CONTRACTIONS = (("does not", "doesn't"), ("do not", "don't"), ("did not", "didn't"), ("is not", "isn't"),
                 ("are not", "aren't"), ("cannot", "can't"), ("will not", "won't"), ("has not", "hasn't"))


def notation(text: str, rng: random.Random) -> str | None:
    """Write the same values another way: 25% <-> 25 percent, $5 -> 5 dollars, 1,000 <-> 1000, contractions."""
    options = []
    if re.search(r"\d%", text):
        options.append(lambda t: re.sub(r"(\d)%", r"\1 percent", t))
    if re.search(r"\d percent\b", text):
        options.append(lambda t: re.sub(r"(\d) percent\b", r"\1%", t))
    if re.search(r"\$\d", text):
        options.append(lambda t: re.sub(r"\$(\d[\d,]*(?:\.\d\d)?)(?![\d.,]*\d)(?!\s*(?:dollars?|each))",
                                        r"\1 dollars", t))
    if re.search(r"\d,\d{3}", text):
        options.append(lambda t: re.sub(r"\d{1,3}(?:,\d{3})+", lambda m: m.group(0).replace(",", ""), t))
    elif re.search(r"(?<![\d.,$])\d{4,6}(?![\d.,])", text):
        options.append(lambda t: re.sub(r"(?<![\d.,])(\d{1,3})(\d{3})(?![\d.,])", r"\1,\2", t))
    for long, short in _CONTRACTIONS:
        if re.search(rf"\b{long}\b", text):
            options.append(lambda t, long=long, short=short: re.sub(rf"\b{long}\b", short, t))
        elif re.search(rf"\b{short}(?!\w)", text):
            options.append(lambda t, long=long, short=short: re.sub(rf"\b{short}(?!\w)", long, t))
    if not options:
        return None
    for rule in rng.sample(options, rng.randint(1, len(options))):
        text = rule(text)
    return text


def join_sentences(text: str, rng: random.Random) -> str | None:
    """Join two adjacent context sentences with ", and" (the question sentence is left alone)."""
    sents = split_sentences(text)
    pairs = [i for i in range(len(sents) - 2)
             if sents[i].endswith(".") and not sents[i].endswith("..") and not sents[i + 1].endswith("?")]
    if not pairs:
        return None
    i = rng.choice(pairs)
    first, second = sents[i][:-1], sents[i + 1]
    if second.split(" ", 1)[0] in _LOWERCASE_STARTERS:  # a proper noun keeps its capital
        second = second[:1].lower() + second[1:]
    return " ".join([*sents[:i], f"{first}, and {second}", *sents[i + 2:]])


def reword_opening(text: str, rng: random.Random) -> str | None:
    """Reword the opening of the question sentence ("Calculate" -> "Find", "How many" -> "What number of")."""
    sents = split_sentences(text)
    if not sents:
        return None
    last = sents[-1]
    for opening, repls in QUESTION_OPENINGS:
        if last.startswith(opening):
            return " ".join([*sents[:-1], rng.choice(repls) + last[len(opening):]])
    return None


@register_paraphraser("rules")
class RuleParaphraser(Paraphraser):
    """Rule-based rewording of real word problems; see the module docstring for the rules."""

    def __init__(self, max_rounds: int = 8, max_rouge_l: float | None = None, p_synonym: float = 0.7,
                 p_numbers: float = 0.5, p_reorder: float = 0.5, p_join: float = 0.3, p_opening: float = 0.5, p_notation: float = 0.4) -> None:
        super().__init__(max_rounds=max_rounds, max_rouge_l=max_rouge_l)
        self.p_synonym, self.p_numbers, self.p_reorder = p_synonym, p_numbers, p_reorder
        self.p_join, self.p_opening, self.p_notation = p_join, p_opening, p_notation

    def propose(self, item: Item, n: int, seed: int, round_: int) -> list[Candidate]:
        """`n` candidates; candidate i of round r draws its rules from a generator seeded by (seed, item, r, i)."""
        out = []
        for i in range(n):
            rng = random.Random(int(stable_hash(f"rules|{seed}|{item.id}|{round_}|{i}"), 16))
            out.append(self._one(item, rng))
        return out

    def _one(self, item: Item, rng: random.Random) -> Candidate:
        texts = [item.question] + ([item.solution] if item.solution else [])
        texts, mapping = swap_names(texts, rng)
        notes = ["names"] if mapping else []
        q = texts[0]
        rules = [(self.p_synonym, "synonyms", lambda t: synonyms(t, rng)),
                 (self.p_numbers, "number words",
                  lambda t: numbers_to_words(t, rng, 0.7) if rng.random() < 0.5 else words_to_numbers(t, rng, 0.7)),
                 (self.p_reorder, "order", lambda t: swap_safe_sentences(t, rng)),
                 (self.p_notation, "notation", lambda t: notation(t, rng)),
                 (self.p_join, "join", lambda t: join_sentences(t, rng)),
                 (self.p_opening, "opening", lambda t: reword_opening(t, rng))]
        for p, note, rule in rules:
            if rng.random() < p:
                new = rule(q)
                if new is not None and new != q:
                    q = new
                    notes.append(note)
        if q == item.question:  # nothing applied: force the first applicable rule, in random order
            for _, note, rule in rng.sample(rules, len(rules)):
                new = rule(q)
                if new is not None and new != q:
                    q = new
                    notes.append(note)
                    break
        solution = texts[1] if item.solution else None
        return Candidate(q, solution, None, note=",".join(notes))
