"""Load benchmark files into `Item`s, and reference / variant files paired to their originals.

The package's public API is re-exported here (`from zcp.benchmarks.loaders import load_items`); its parts:

- `files`: reading JSONL / JSON / parquet into rows, answers kept as the text written in the file;
- `layouts`: the source layouts (`gsm8k`, `zcp_release` and its variants, `jsonl`/`items` with a field map);
- `rows`: one row as an `Item` (the row schema: text fields, ids, links to an original);
- `duplicates`: a benchmark holds each question once (`check_duplicates`, policy `on_duplicate`);
- `benchmark`: a file read and its items selected (`load_benchmark`, `load_items`), `save_items`;
- `pairing`: reference / variant rows paired to their originals by one declared key (`load_paired`).

Every error is a one-line `DataError` naming file, row and field.
"""

from zcp.benchmarks.loaders.benchmark import PAIR_BY, Benchmark, load_benchmark, load_items, save_items
from zcp.benchmarks.loaders.duplicates import DUPLICATE_POLICIES, check_duplicates
from zcp.benchmarks.loaders.files import JSONNumber, RawFile, read_rows, resolve_path
from zcp.benchmarks.loaders.layouts import (
    FIELD_KEYS,
    FORMATS,
    ORIGINAL_TEXT_FIELDS,
    RELEASE_VARIANTS,
    SOURCE_INDEX_FIELDS,
    field_map,
)
from zcp.benchmarks.loaders.pairing import load_paired, pair_rows, read_linked, resolve_pair_by

__all__ = [
    "DUPLICATE_POLICIES",
    "FIELD_KEYS",
    "FORMATS",
    "ORIGINAL_TEXT_FIELDS",
    "PAIR_BY",
    "RELEASE_VARIANTS",
    "SOURCE_INDEX_FIELDS",
    "Benchmark",
    "JSONNumber",
    "RawFile",
    "check_duplicates",
    "field_map",
    "load_benchmark",
    "load_items",
    "load_paired",
    "pair_rows",
    "read_linked",
    "read_rows",
    "resolve_pair_by",
    "resolve_path",
    "save_items",
]
