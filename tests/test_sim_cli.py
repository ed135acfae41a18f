"""The `moesim sim hitrate` and `moesim train ml-ffn` commands, as a user runs them."""

import json

import numpy as np

from moesim.tracegen.trace import bundled_trace_path

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
    assert code == 1 and err.startswith("moesim: error: --capacity 1 is below top_k 2")
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


def test_sim_run_json_has_the_documented_keys(cli):
    code, out, _ = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--vram", "48", "--policy",
                       "lru,belady", "--capacity", "4", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    keys = {"tpot_s", "tpot_p50_s", "tpot_p99_s", "tokens_per_s", "ttft_s", "compute_s", "copy_s", "stall_s",
            "bytes_h2d", "bytes_ssd", "hit_rate", "prefetch_precision", "prefetch_recall", "substitutions", "vram_gb",
            "ram_gb", "vram_limit_gb", "ram_limit_gb", "strategy", "cpu_share"}
    assert all(keys <= set(r) for r in results)
    by = {r["policy"]: r for r in results}
    assert by["belady"]["tpot_s"] < by["lru"]["tpot_s"]
    assert by["lru"]["hits"] == 9389  # tests/golden/hitrates.csv: lru, per-layer, step, 4 slots
    assert by["lru"]["ttft_s"] is None  # the trace has no prompt rows
    assert by["lru"]["vram_limit_gb"] == 48 and 45 < by["lru"]["vram_gb"] < 48


def test_split_best_on_the_command_line(cli):
    """--split best: the memory of C slots per layer, shared out over the layers; both engines report the
    per-layer list they ran and a hit rate no lower than the uniform split's."""
    args = ("sim", "hitrate", bundled_trace_path(), "--policy", "lru", "--capacity", "3", "--json", "--split")
    code, out, err = cli(*args, "uniform")
    uniform = json.loads(out)["results"][0]
    code, out, err = cli(*args, "best")
    best = json.loads(out)["results"][0]
    assert code == 0 and len(best["capacity"]) == 32 and sum(best["capacity"]) == 96, err
    assert best["hit_rate"] > uniform["hit_rate"]
    code, out, err = cli("sim", "run", bundled_trace_path(), "--capacity", "auto", "--dtype", "q4_k", "--split", "best",
                         "--json")
    row = json.loads(out)["results"][0]
    assert code == 0 and sum(row["capacity"]) == 6 * 32 and row["split"] == "best", err
    code, out, err = cli("sim", "run", bundled_trace_path(), "--capacity", "3", "--split", "best", "--dtype", "q4_k")
    assert code == 0 and "96 (2-5/layer)" in out, err
    code, _, err = cli("sim", "run", bundled_trace_path(), "--scope", "global", "--split", "best")
    assert code == 1 and "split best shares slots out over the layers' own caches" in err


def test_sim_run_refuses_what_does_not_fit_and_sizes_auto(cli):
    """Issue 18's acceptance: Mixtral bf16 with 4 of 8 experts per layer needs 42 GiB of experts."""
    code, _, err = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--capacity", "4", "--dtype", "bf16")
    assert code == 1 and "needs 46.0 GiB of GPU memory (42.0 experts" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--capacity", "auto", "--dtype",
                         "int4", "--json")
    row = json.loads(out)["results"][0]
    assert code == 0 and row["capacity"] == 7 and row["vram_gb"] <= row["vram_limit_gb"] == 24, err


def test_sim_run_table_prefetch_tiers_and_errors(cli, tmp_path):
    fits = ("--dtype", "int4")
    code, out, _ = cli("sim", "run", bundled_trace_path(), *fits, "--prefetch", "history", "--mode", "commit")
    assert code == 0 and "substitutions" in out and "precision" in out
    code, out, _ = cli("sim", "run", bundled_trace_path(), *fits, "--ssd", "pcie5-nvme", "--dram-capacity", "32",
                       "--json")
    assert code == 0 and json.loads(out)["results"][0]["bytes_ssd"] > 0
    for args, message in ((["--prefetch", "speculative"], "spec column"), (["--hardware", "tpu"], "--hardware must be a preset (h100, "),
                          (["--dram-capacity", "4"], "has none"), (["--mode", "commit"], "mode commit runs next-layer predictions"),
                          (["--model", "olmoe-1b-7b"], "(layers, experts, top_k)"), (["--capacity", "1"], "below top_k")):
        code, _, err = cli("sim", "run", bundled_trace_path(), *fits, *args)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, (args, err)


def test_hardware_presets_and_toml(cli, tmp_path):
    code, out, _ = cli("hardware", "--json")
    listed = json.loads(out)
    assert code == 0 and listed["links"]["pcie4"]["gbps"] == 32 and listed["ssds"]["pcie5-nvme"]["gbps"] == 7.4
    assert set(listed["systems"]) >= {"h100", "a100-40g", "a6000", "rtx4090", "rtx2080ti", "rtx5070ti", "gh200"}
    box = tmp_path / "box.toml"
    box.write_text('name = "box"\ngpu = "rtx4090"\n[link]\ngbps = 16\nefficiency = 0.5\nlatency_us = 20\n')
    code, out, _ = cli("sim", "run", bundled_trace_path(), "--hardware", box, "--dtype", "int4", "--json")
    slow = json.loads(out)["results"][0]
    code, out, _ = cli("sim", "run", bundled_trace_path(), "--hardware", "rtx4090", "--dtype", "int4", "--json")
    assert slow["hardware"] == "box" and slow["tpot_s"] > json.loads(out)["results"][0]["tpot_s"]
    for text, message in (("[link]\ngbps = 16\n", "a machine needs a GPU with the link experts reach it by ([gpu] and [link]"), ('gpu = "rtx4090"\n[link]\nspeed = 1\n', "unknown key"),
                          ("gpu = [", "not valid TOML"), ('gpu = "rtx4090"\n[link]\ngbps = -1\n', "gbps must be a finite number > 0"),
                          ('gpu = "rtx4090"\nlink = "pcie4"\n[cpu]\ncores = 8\nghz = 4\nisa = "sse"\ndram_gbps = 50\nram_gb = 64\n',
                           "isa must be one of"),
                          ('gpu = "rtx4090"\nlink = "pcie4"\ncpu = "ryzen-7950x"\n[disk]\n', "unknown section(s) disk")):
        box.write_text(text)
        code, _, err = cli("sim", "run", bundled_trace_path(), "--hardware", box)
        assert code == 1 and message in err and str(box) in err, (text, err)


def test_names_in_brackets_print_as_they_are(cli, tmp_path):
    """Nothing moesim prints is rich markup: a calibrated file's name, "... (see [compute])", kept its brackets."""
    box = tmp_path / "box.toml"
    box.write_text('name = "box [compute]"\ngpu = "rtx4090"\n[link]\ngbps = 16\n')
    code, out, _ = cli("sim", "run", bundled_trace_path(), "--hardware", box, "--dtype", "int4", "--capacity", "4")
    assert code == 0 and "box [compute]" in " ".join(out.split()), out


def test_hardware_file_round_trips(tmp_path):
    from moesim.sim.hardware import get_hardware, load_hardware, write_hardware

    hw = get_hardware("a6000", ssd="pcie4-nvme")
    write_hardware(hw, tmp_path / "hw.toml")
    back = load_hardware(tmp_path / "hw.toml")
    assert (back.gpu, back.link, back.ssd, back.cpu) == (hw.gpu, hw.link, hw.ssd, hw.cpu)


def test_sim_run_on_a_cpu_only_machine_takes_llama_cpps_cpu_build_unless_a_strategy_is_asked(cli, tmp_path):
    """No [gpu]: every layer's experts on the CPU (cpu-experts) by default; an asked GPU strategy is refused."""
    import json

    trace = tmp_path / "t.parquet"
    assert cli("trace", "synth", "--model", "olmoe-1b-7b", "--sequences", "1", "--tokens", "8", "--out", trace)[0] == 0
    code, out, err = cli("sim", "run", trace, "--model", "olmoe-1b-7b", "--hardware", "ryzen-7950x", "--dtype",
                         "q4_0", "--json")
    assert code == 0, err
    result = json.loads(out)["results"][0]
    assert result["strategy"] == "cpu-experts" and result["tokens_per_s"] > 0
    code, out, err = cli("sim", "run", trace, "--model", "olmoe-1b-7b", "--hardware", "ryzen-7950x", "--strategy",
                         "gpu-cache")
    assert code == 1 and "has no GPU: every expert runs on its CPU" in err
