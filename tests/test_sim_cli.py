"""The `moesim sim hitrate` and `moesim train ml-ffn` commands, as a user runs them."""

import json

import numpy as np

from moesim.tracegen.io import bundled_trace_path

POLICIES = "belady,lru,lfu,fifo,arc,lecar,gamma"


def test_hitrate_json_on_real_trace(cli):
    code, out, _ = cli("sim", "hitrate", bundled_trace_path(), "--policy", POLICIES, "--capacity", "4",
                       "--semantics", "sequential", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    keys = {"policy", "capacity", "scope", "semantics", "accesses", "hits", "misses", "hit_rate",
            "per_layer_hit_rate", "seconds", "accesses_per_s"}
    assert all(keys <= set(r) for r in results)
    by = {r["policy"]: r for r in results}
    # libCacheSim's numbers for this trace (tests/test_hitrate_oracle.py checks them live)
    assert by["lru"]["misses"] == 6650 and by["belady"]["misses"] == 3953 and by["arc"]["misses"] == 6657
    assert min(by, key=lambda p: by[p]["misses"]) == "belady"
    assert len(by["lru"]["per_layer_hit_rate"]) == 32


def test_hitrate_table_and_errors(cli, tmp_path):
    code, out, _ = cli("sim", "hitrate", bundled_trace_path(), "--policy", "lru,static", "--capacity", "2,6")
    assert code == 0 and "static" in out and "lru" in out
    code, _, err = cli("sim", "hitrate", bundled_trace_path(), "--capacity", "1")
    assert code == 1 and err.startswith("moesim: error: capacity 1 is below top_k 2")
    code, _, err = cli("sim", "hitrate", bundled_trace_path(), "--capacity", "x")
    assert code == 1 and "--capacity" in err
    bad = tmp_path / "model.npz"
    bad.write_bytes(b"not a model")
    code, _, err = cli("sim", "hitrate", bundled_trace_path(), "--policy", "ml-ffn", "--ml-model", bad)
    assert code == 1 and str(bad) in err and len(err.strip().splitlines()) == 1


def test_train_ml_ffn_then_simulate(cli, tmp_path):
    model = tmp_path / "ffn.npz"
    code, out, _ = cli("train", "ml-ffn", bundled_trace_path(), "--out", model, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["train_sequences"] == [0] and report["val_sequences"] == [1]
    rates = report["val_hit_rate"]
    assert 0 < rates["ml-ffn"] <= rates["belady"] and 0 < rates["lru"] <= rates["belady"]
    with np.load(model, allow_pickle=False) as f:
        assert f["w1"].shape == (32, 16, 128) and f["w3"].shape == (32, 128, 8)
    code, out, _ = cli("sim", "hitrate", bundled_trace_path(), "--policy", "ml-ffn", "--ml-model", model, "--json")
    assert code == 0 and 0 < json.loads(out)["results"][0]["hit_rate"] < 1
