"""CI regression guard: hit rates must equal tests/golden/hitrates.csv (all policies are
deterministic, random and lecar seeded, so the comparison is exact). After an intended change run
`moesim sim golden --update`, which prints the rows that moved, and commit the file."""

from pathlib import Path

import polars as pl

from moesim.experiments.golden import diff, golden_table, read_golden

GOLDEN = Path(__file__).parent / "golden" / "hitrates.csv"


def test_hit_rates_match_golden_file():
    changed = diff(read_golden(GOLDEN), golden_table())
    assert changed.height == 0, f"hit rates moved; review, then `moesim sim golden --update`:\n{changed}"


def test_golden_command_reports_and_updates(cli, tmp_path):
    path = tmp_path / "g.csv"
    pl.read_csv(GOLDEN).with_columns(hits=pl.col("hits") + (pl.col("policy") == "lru").cast(pl.Int64)).write_csv(path)
    code, out, err = cli("sim", "golden", "--file", path)
    assert code == 1 and "differ" in err and "lru" in out
    code, out, _ = cli("sim", "golden", "--file", path, "--update")
    assert code == 0 and "wrote" in out
    assert cli("sim", "golden", "--file", path)[0] == 0


def test_an_odd_golden_file_is_one_line_and_every_column_is_compared(cli, tmp_path):
    """Other headers, an empty file, a folder and a repeated row were polars tracebacks; an edited hit rate or
    access count passed as 'all rows match' (only hits were compared); --update made missing folders."""
    golden = pl.read_csv(GOLDEN)
    cases = {"headers.csv": "a,b\n1,2\n", "empty.csv": ""}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    golden.head(3).vstack(golden.head(1)).write_csv(tmp_path / "repeated.csv")
    for name, message in (("headers.csv", "not a golden table"), ("empty.csv", "not a golden table"),
                          ("repeated.csv", "a row repeats another's"), (".", "a folder, not a golden table")):
        code, _, err = cli("sim", "golden", "--file", tmp_path / name)
        assert code == 1 and message in err and err.count("\n") == 1, (name, err)
    edited = tmp_path / "edited.csv"
    golden.with_columns(hit_rate=pl.when(pl.col("policy") == "fifo").then(0.5).otherwise(pl.col("hit_rate")),
                        accesses=pl.col("accesses") + (pl.col("policy") == "arc").cast(pl.Int64)).write_csv(edited)
    code, out, err = cli("sim", "golden", "--file", edited)
    assert code == 1 and "fifo" in out and "arc" in out, out
    code, _, err = cli("sim", "golden", "--update", "--file", tmp_path / "absent" / "g.csv")
    assert code == 1 and "no such folder" in err and not (tmp_path / "absent").exists()
    code, _, err = cli("sim", "golden", "--update", "--file", tmp_path / "g.txt")
    assert code == 1 and "unknown golden table format '.txt'" in err
    code, out, err = cli("sim", "golden", "--update", "--file", tmp_path / "repeated.csv")  # --update mends it
    assert code == 0 and "rewriting it whole" in " ".join(out.split()), err
    assert cli("sim", "golden", "--file", tmp_path / "repeated.csv")[0] == 0
