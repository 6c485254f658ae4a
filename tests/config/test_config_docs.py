"""docs/configuration.md's option tables come from the schemas (scripts/gen_config_docs.py), and are current.

Why: the schema dataclasses are where defaults live; a table that drifted from them would document a default
the code does not have. A schema change that is not followed by `scripts/gen_config_docs.py` fails here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gen_config_docs.py"


def _script():
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass
class _Inner:
    """An inner group."""

    depth: int = 2  # how deep


@dataclass
class _Toy:
    """A toy group."""

    alpha: float = 0.05  # the level
    # a comment block above a field
    # that runs over two lines
    names: list[str] = field(default_factory=lambda: ["a", "b"])
    inner: _Inner = field(default_factory=_Inner)
    plain: str | None = None


def test_configuration_doc_is_generated_from_the_current_schemas():
    """`--check` in a fresh interpreter (the job registry's import order is that of the script, not of this run)."""
    res = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]


def test_every_job_and_every_named_group_has_a_table():
    from zcp.config import schemas

    gen = _script()
    text = gen.generate()
    for name, root in gen.jobs():
        assert f"`{name}`" in text and f"`{gen.qualname(root)}`" in text, name
        for f in dataclasses.fields(root):
            assert f"| `{f.name}` |" in text, (name, f.name)
    for group, cls in schemas.SCHEMAS.items():
        assert f'<a id="{gen.anchor(cls)}"></a>' in text, group
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in text, (group, f.name)


def test_rows_carry_type_default_and_the_source_comment():
    gen = _script()
    comments = gen.field_comments(_Toy)
    assert comments["alpha"] == "the level"
    assert comments["names"] == "a comment block above a field that runs over two lines"
    assert comments["plain"] == ""
    rows = "\n".join(gen.key_table(_Toy))
    assert "| `alpha` | `float` | `0.05` | the level |" in rows
    assert "| `names` | `list[str]` | `[a, b]` |" in rows
    assert f"| `inner` | `_Inner` | [`_Inner`](#{gen.anchor(_Inner)}) |" in rows
    assert "| `plain` | `str \\| None` | `null` |" in rows
    assert [key for key, _ in gen.walk(_Toy)] == ["inner"]


def test_the_hand_written_head_is_kept():
    gen = _script()
    head = "# Configuration\n\nWritten by hand.\n\n"
    once = gen.updated(head + gen.BEGIN + "\nold tables\n" + gen.END + "\n", "new tables\n")
    assert once.startswith(head) and "old tables" not in once and "new tables" in once
    assert gen.updated(once, "new tables\n") == once
