"""The public API as a new user meets it: a setting nothing reads is refused, an output is checked before it is
written, and numpy's numbers are the numbers they hold."""

from __future__ import annotations

import numpy as np
import pytest

import moesim
from moesim.errors import MoesimError


def test_mrc_refuses_a_capacity_it_does_not_read(mixtral):
    with pytest.raises(MoesimError, match=r"^capacity: mrc runs every capacity \(or those in capacities=\[\.\.\.\]\), "
                                          r"so nothing reads it; pass capacities=\[8\]$"):
        moesim.mrc(mixtral, "lru", capacity=8)
    with pytest.raises(MoesimError, match=r"^capacity: .* so nothing reads it$"):
        moesim.mrc(mixtral, "lru", capacity=(4,) * mixtral.meta.num_layers)


def test_mrc_refuses_a_split_it_does_not_read(mixtral):
    with pytest.raises(MoesimError, match=r"^split: mrc runs each capacity in every layer, so nothing reads it; "
                                          r"best_split\(trace, budget, curve=\.\.\.\)"):
        moesim.mrc(mixtral, "lru", split="best")


def test_write_trace_refuses_another_format_and_an_existing_file_unless_forced(mixtral, tmp_path):
    one = mixtral.select([1])
    with pytest.raises(MoesimError, match=r"x\.csv: unknown trace format '\.csv' \(use \.parquet\)"):
        moesim.write_trace(one, tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()
    path = tmp_path / "t.parquet"
    moesim.write_trace(one, path)
    before = path.read_bytes()
    with pytest.raises(MoesimError, match=r"t\.parquet: exists; pass force=True to replace the trace$"):
        moesim.write_trace(mixtral, path)
    assert path.read_bytes() == before
    moesim.write_trace(mixtral, path, force=True)
    assert moesim.load_trace(path).num_rows == mixtral.num_rows


def test_numpy_capacities_are_the_numbers_they_hold(mixtral):
    layers = mixtral.meta.num_layers
    assert moesim.hitrate(mixtral, "lru", capacity=np.int64(4)).hits == moesim.hitrate(mixtral, "lru", capacity=4).hits
    uneven = [3 + layer % 3 for layer in range(layers)]
    per_layer = moesim.hitrate(mixtral, "lru", capacity=tuple(uneven))
    assert moesim.hitrate(mixtral, "lru", capacity=np.array(uneven, np.int64)).per_layer_hits == \
        per_layer.per_layer_hits
    assert moesim.hitrate(mixtral, "lru", capacity=np.array([4] * layers)).hits == \
        moesim.hitrate(mixtral, "lru", capacity=(4,) * layers).hits == moesim.hitrate(mixtral, "lru", capacity=4).hits
    with pytest.raises(MoesimError, match=r"^\[cache\] a capacity per layer is a list of whole numbers >= 0"):
        moesim.hitrate(mixtral, "lru", capacity=np.full(layers, 4.5))
