"""Every result as a table, for notebooks: ``.to_polars()``, ``.to_pandas()`` and a table in Jupyter's output.

Each result kind says what its rows are (``Tabular.table_rows``): one row for one run (``simulate``'s, a replay's,
one hit rate: its ``as_dict()``), a row per entry for a list of them (``Table``: ``mrc``'s curve, ``validate``'s
rows), a row per ranked placement for a plan, a row per configuration for a sweep (its results file). Polars builds
the frame (a column of mixed kinds, as ``capacity`` is an int or a list of one per layer, is kept, not refused);
pandas builds its own from the same rows, so neither needs the other (nor pyarrow). The other way, ``moesim.plot``
takes a pandas frame of results as it takes a polars one (``from_pandas``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from moesim.errors import MoesimError

if TYPE_CHECKING:
    import polars as pl


class Tabular:
    """A result that is a table: its rows (``table_rows``, dicts of plain values) as a polars or pandas frame, and
    as HTML where Jupyter shows it."""

    def table_rows(self) -> list[dict]:
        return [self.as_dict()]

    def to_polars(self) -> pl.DataFrame:
        import polars as pl  # (imported by what makes a table: a command's start goes without it)

        return pl.DataFrame(self.table_rows(), strict=False, infer_schema_length=None)

    def to_pandas(self):
        try:
            import pandas as pd
        except ImportError:
            raise MoesimError("to_pandas needs pandas: pip install pandas (or use .to_polars())") from None
        return pd.DataFrame(self.table_rows())

    def _repr_html_(self) -> str:
        return self.to_polars()._repr_html_()


class Table(list, Tabular):
    """A list of results (or of dicts), one row each: ``mrc``'s curve, ``validate``'s rows. It is still the list."""

    def table_rows(self) -> list[dict]:
        return [r if isinstance(r, dict) else r.as_dict() for r in self]


def is_pandas(frame) -> bool:
    """Whether ``frame`` is a pandas DataFrame (told without importing pandas)."""
    return type(frame).__module__.startswith("pandas") and type(frame).__name__ == "DataFrame"


def from_pandas(frame) -> pl.DataFrame:
    """A pandas DataFrame (a sweep's results a notebook changed) as the polars frame moesim reads, column by column:
    no pyarrow needed, whatever pandas stores its strings as."""
    import polars as pl

    return pl.DataFrame({str(c): frame[c].tolist() for c in frame.columns}, strict=False)


class Drawn(type(Path())):
    """A figure's path, as ``moesim.plot`` returns it: a ``Path``, which a notebook also shows inline (its PNG)."""

    def _repr_png_(self) -> bytes | None:
        return self.read_bytes() if self.suffix.lower() == ".png" and self.is_file() else None
