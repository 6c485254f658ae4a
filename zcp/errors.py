"""The error types of zcp: the one leaf module every other imports (no import of zcp here).

User mistakes end as one line, exit code 2 (`zcp.config.one_line_errors`): `ConfigError` for a configuration
value (a key, range or path), `DataError` for bad input data (the file, row and field), `RunDirError` for a run
directory that cannot be used as it is.
"""

from __future__ import annotations

import re

# Everything str.splitlines() breaks at, with the spaces around it.
_LINE_BREAKS = re.compile("\\s*[\\n\\r\\x0b\\x0c\\x1c\\x1d\\x1e\\x85\\u2028\\u2029]+\\s*")


class ConfigError(ValueError):
    """A configuration value a user set wrong (a key, range or path); reported as one line."""


class DataError(ValueError):
    """Bad input data; the message names the file, the row (1-based line) and the field.

    The message is always one line (line breaks inside it, e.g. from a quoted question, become spaces), so
    a log or a CI summary shows the whole reason.
    """

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None,
                 field: str | None = None) -> None:
        where = ", ".join(
            part for part in (
                f"file {path}" if path else "",
                f"row {row}" if row is not None else "",
                f"field '{field}'" if field else "",
            ) if part
        )
        super().__init__(_LINE_BREAKS.sub(" ", f"{where}: {message}" if where else message))
        self.path, self.row, self.field = path, row, field


class RunDirError(RuntimeError):
    """A run directory that cannot be used as it is (held by another run, or a state file cut short)."""
