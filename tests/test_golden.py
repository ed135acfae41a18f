"""CI regression guard: hit rates must equal tests/golden/hitrates.csv (all policies are
deterministic, random and lecar seeded, so the comparison is exact). After an intended change run
`moesim sim golden --update`, which prints the rows that moved, and commit the file."""

from pathlib import Path

import polars as pl

from moesim.experiments.golden import diff, golden_table

GOLDEN = Path(__file__).parent / "golden" / "hitrates.csv"


def test_hit_rates_match_golden_file():
    changed = diff(pl.read_csv(GOLDEN), golden_table())
    assert changed.height == 0, f"hit rates moved; review, then `moesim sim golden --update`:\n{changed}"


def test_golden_command_reports_and_updates(cli, tmp_path):
    path = tmp_path / "g.csv"
    pl.read_csv(GOLDEN).with_columns(hits=pl.col("hits") + (pl.col("policy") == "lru").cast(pl.Int64)).write_csv(path)
    code, out, err = cli("sim", "golden", "--file", path)
    assert code == 1 and "differ" in err and "lru" in out
    code, out, _ = cli("sim", "golden", "--file", path, "--update")
    assert code == 0 and "wrote" in out
    assert cli("sim", "golden", "--file", path)[0] == 0
