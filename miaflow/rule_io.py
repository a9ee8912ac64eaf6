"""A rule's list inputs and outputs as the library reads and writes them: a list of Parquet files
as one table, the one output of a list with a given file name, a table's stem (a table is one
stem in csv, md and tex: `multiext(stem, ".csv", ".md", ".tex")`) and a table builder's table
written to its files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from miaflow import io

Paths = Sequence[str | Path]


def file_named(paths: Paths, name: str) -> Path:
    """The one path among `paths` whose file name is `name`."""
    matches = [Path(p) for p in paths if Path(p).name == name]
    if len(matches) != 1:
        raise ValueError(f"expected one output named {name!r} among {sorted(map(str, paths))}")
    return matches[0]


def table_stem(paths: Paths) -> Path:
    """The common stem of a table's files (`multiext(stem, ".csv", ".md", ".tex")` outputs)."""
    stems = {Path(p).with_suffix("") for p in paths}
    if len(stems) != 1:
        raise ValueError(f"the files of one table must share a stem, got {sorted(map(str, paths))}")
    return stems.pop()


def concat_parquet(paths: Paths, columns: Sequence[str] = (), **read: Any) -> pd.DataFrame:
    """The Parquet files of a list input, read (`read`: options of io.read_parquet) and
    concatenated; an empty list gives an empty table of `columns`."""
    if not paths:
        return pd.DataFrame(columns=list(columns))
    return pd.concat([io.read_parquet(p, **read) for p in paths], ignore_index=True)
