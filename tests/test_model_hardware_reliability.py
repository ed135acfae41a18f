"""Model and hardware readers refuse what would give silently wrong numbers, in one line naming the file and key:
a trace synthesised from a model file simulated without it, hardware values no machine comes near (which
overflowed the model to inf or NaN), config.json fields read wrong, a truncated GGUF, hardware-file names; and the
model table says what its int4 column counts."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

import moesim
from moesim.errors import MoesimError, MoesimWarning
from moesim.sim.hardware import TEMPLATE, load_hardware
from moesim.sim.memory import DoesNotFit
from moesim.tracegen.model_spec import check_model
from moesim.tracegen.models import get_model, model_for_trace
from moesim.tracegen.schema import TraceMeta

Q3 = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 4, "num_experts": 16,
      "num_experts_per_tok": 4, "moe_intermediate_size": 768, "intermediate_size": 6144, "num_attention_heads": 32,
      "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936}
WHY = "and a trace's metadata holds only its MoE dimensions, not its attention, vocabulary or dense layers"


def one_line_error(cli, *args) -> str:
    code, _, err = cli(*args)
    assert code == 1 and err.count("\n") == 1 and err.startswith("moesim: error: "), (args, code, err)
    return err.removeprefix("moesim: error: ").rstrip("\n")


def config(tmp_path: Path, folder: str = "q3", **changes) -> str:
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "config.json").write_text(json.dumps({**Q3, **changes}))
    return f"{folder}/config.json"


# --- 1. a trace synthesised from a config.json -----------------------------------------------------------------

def test_a_trace_synthesised_from_a_config_json_is_not_simulated_as_another_model(cli, tmp_path, monkeypatch):
    """Without --model it is refused, naming the file to pass; with it, the config's model (vocabulary and
    attention included: more GPU memory than the MoE dimensions alone)."""
    monkeypatch.chdir(tmp_path)
    path = config(tmp_path)
    full = (tmp_path / "q3" / "config.json").resolve()  # the trace names it so, to be found from any folder
    assert cli("trace", "synth", "--model", path, "--sequences", "2", "--tokens", "16", "--out", "q3.parquet")[0] == 0
    code, out, _ = cli("trace", "info", "q3.parquet", "--json")
    info = json.loads(out)
    assert code == 0 and info["model"] == "synthetic-q3"
    assert info["source"] == ("synth(seed=0, layer_alpha=2, seq_alpha=1.5, reuse=0.25, cross_layer=0.3); "
                              f"model file {full}")
    assert one_line_error(cli, "sim", "run", "q3.parquet", "--capacity", "4", "--dtype", "q4_k") == (
        f"trace model 'synthetic-q3' was made from the model file {full}, {WHY}: pass --model {full} to simulate it")
    code, out, err = cli("sim", "run", "q3.parquet", "--capacity", "4", "--dtype", "q4_k", "--model", path, "--json")
    run = json.loads(out)["results"][0]
    assert code == 0 and run["model"] == "q3", err
    assert run["vram_gb"] == moesim.simulate(moesim.load_trace("q3.parquet"), model=get_model(path), capacity=4,
                                             dtype="q4_k").vram_gb
    # a trace synthesised like it (--like) is of the same model, and says so too
    assert cli("trace", "synth", "--like", "q3.parquet", "--out", "like.parquet")[0] == 0
    assert one_line_error(cli, "sim", "run", "like.parquet", "--capacity", "4") == (
        f"trace model 'synthetic-like-synthetic-q3' was made from the model file {full}, {WHY}: pass --model {full} "
        "to simulate it")
    monkeypatch.chdir(tmp_path / "q3")  # from another folder, the file it names is the one read
    code, out, err = cli("sim", "run", "../like.parquet", "--capacity", "4", "--dtype", "q4_k", "--model", full, "--json")
    assert code == 0 and json.loads(out)["results"][0]["model"] == "q3", err


def test_the_api_and_older_traces_of_a_model_file_name_what_to_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = config(tmp_path)
    full = (tmp_path / "q3" / "config.json").resolve()
    trace = moesim.synth_trace(4, 16, 4, sequences=1, tokens=4, seed=0, model=path)
    with pytest.raises(MoesimError) as caught:
        moesim.simulate(trace, capacity=4)
    assert str(caught.value) == (f"trace model 'q3' was made from the model file {full}, {WHY}: pass "
                                 f"model='{full}' to simulate it")
    assert moesim.simulate(trace, model=path, capacity=4).model == "q3"
    # an import with --model FILE names it too (the log's own source first)
    assert get_model(path).trace_meta(source="vllm-jsonl:r.jsonl").source == f"vllm-jsonl:r.jsonl; model file {full}"
    # a trace an older moesim synthesised from a file: its name is no preset's, and it did not name the file
    meta = TraceMeta(num_layers=4, num_experts=16, top_k=4, model="synthetic-q3", d_model=2048, d_expert=768,
                     source="synth(seed=0)")
    with pytest.raises(MoesimError) as caught:
        model_for_trace(meta)
    assert str(caught.value) == (f"trace model 'synthetic-q3' was synthesised from a model file (no preset is named "
                                 f"q3), {WHY}: pass model with that config.json or GGUF file to simulate it")
    # a preset's synthetic trace, and a trace of an unknown model (its dimensions), still run on their own
    assert model_for_trace(meta.replace(model="synthetic-olmoe-1b-7b", num_layers=16, num_experts=64, top_k=8)).name \
        == "olmoe-1b-7b"
    assert model_for_trace(meta.replace(model="recorded-model")).source == "trace metadata"


# --- 2. hardware values no real machine comes near -------------------------------------------------------------

def template_with(tmp_path: Path, old: str, new: str, name: str = "box.toml") -> Path:
    assert old in TEMPLATE
    path = tmp_path / name
    path.write_text(TEMPLATE.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old, new, message", [
    ("gbps = 32 ", "gbps = 1e-310 ", "[link] gbps must be from 0.001 to 1e6 GB/s (no real machine comes near that), "
                                     "got 1e-310"),
    ("# launch_us = 5 ", "launch_us = 1e308 ", "[gpu] launch_us must be at most 1e6 us (no real machine comes near "
                                               "that), got 1e+308"),
    ("ghz = 4.2 ", "ghz = 1e-320 ", "[cpu] ghz must be from 0.01 to 100 GHz (no real machine comes near that), got "
                                    "1e-320"),
    ("hbm_gbps = 360 ", "hbm_gbps = 1e-300 ", "[gpu] hbm_gbps must be from 0.001 to 1e6 GB/s (no real machine comes "
                                              "near that), got 1e-300"),
    ("# latency_us = 10 ", "latency_us = 1e308 ", "[link] latency_us must be at most 1e6 us (no real machine comes "
                                                  "near that), got 1e+308"),
    ("hbm_gb = 12 ", "hbm_gb = 1e300 ", "[gpu] hbm_gb must be from 0.001 to 1e6 GiB (no real machine comes near "
                                        "that), got 1e+300"),
    ("ram_gb = 32 ", "ram_gb = 2e6 ", "[cpu] ram_gb must be from 0.001 to 1e6 GiB (no real machine comes near that), "
                                      "got 2000000.0; 2000000 MiB would be 1953 GiB: is it MiB?"),
    ("# mem_eff = 0.8 ", "mem_eff = 1e-310 ", "[gpu] mem_eff must be from 0.001 to 1 (no real machine comes near "
                                              "that), got 1e-310"),
    ("tflops = 25.6 ", "tflops = 1e300 ", "[gpu] tflops must be from 1e-6 to 1e6 TFLOP/s (no real machine comes near "
                                          "that), got 1e+300"),
    ("# unpack_gbps = {q4_0 = 9.5, bf16 = 12}", "unpack_gbps = {q4_0 = 1e-300}",
     "[cpu] unpack_gbps.q4_0 must be from 0.001 to 1e6 GB/s (no real machine comes near that), got 1e-300"),
    ("# attn_gflops = 10.7 ", "attn_gflops = 1e308 ", "[cpu] attn_gflops must be from 0.001 to 1e6 GFLOP/s (no real "
                                                      "machine comes near that), got 1e+308"),
])
def test_hardware_values_no_machine_comes_near_are_refused(cli, tmp_path, old, new, message):
    path = template_with(tmp_path, old, new)
    assert one_line_error(cli, "hardware", "--show", path) == f"{path}: {message}"
    assert one_line_error(cli, "sim", "run", "bundled", "--hardware", path, "--capacity", "4") == f"{path}: {message}"


def test_a_calibrated_compute_time_past_a_second_is_refused(tmp_path):
    path = template_with(tmp_path, "[cpu]  ", '[compute]\nname = "olmoe-1b-7b"\nlayer_s = 1e-4\nexpert_s = 1e-5\n'
                         "layer_token_s = 1e308\n\n[cpu]  ")
    with pytest.raises(MoesimError) as caught:
        load_hardware(path)
    assert str(caught.value) == (f"{path}: [compute] layer_token_s must be at most 1 s (no real machine comes near "
                                 "that), got 1e+308")


def test_memory_sizes_given_as_options_are_bounded_too():
    trace = moesim.synth_trace(16, 64, 8, sequences=1, tokens=2, seed=0, model="olmoe-1b-7b")
    for setting, message in (({"vram": 1e300}, "vram must be from 0.001 to 1e6 GiB (no real machine comes near "
                                                "that), got 1e+300"),
                             ({"ram": 1e7}, "ram must be from 0.001 to 1e6 GiB (no real machine comes near that), "
                                            "got 10000000.0")):
        with pytest.raises(MoesimError) as caught:
            moesim.simulate(trace, capacity=8, **setting)
        assert str(caught.value) == message


NEEDS = ("a machine needs a GPU with the link experts reach it by ([gpu] and [link], e.g. link = \"pcie4\"; a GPU "
         "whose memory is the host's: unified = true in [gpu]), a CPU ([cpu]), or both")


def test_a_machine_built_in_code_is_checked_as_a_file_is():
    """The Python API takes a ``Hardware`` object as it is built: its numbers meet the rules and ranges a hardware
    file's do, in ``simulate``, ``serve`` and a virtual replay alike (before, a zero bandwidth was a ZeroDivisionError,
    a link of 1e-310 GB/s a NaN TPOT, a GPU without its link an AttributeError)."""
    trace = moesim.synth_trace(16, 64, 8, sequences=1, tokens=2, seed=0, model="olmoe-1b-7b")
    hw = moesim.hardware("rtx4090")
    for bad, message in ((replace(hw, gpu=replace(hw.gpu, hbm_gbps=0.0)), "[gpu] hbm_gbps must be a finite number "
                                                                          "> 0, got 0.0"),
                         (replace(hw, link=replace(hw.link, gbps=1e-310)), "[link] gbps must be from 0.001 to 1e6 GB/s "
                                                                           "(no real machine comes near that), got "
                                                                           "1e-310"),
                         (replace(hw, cpu=replace(hw.cpu, threads=10 ** 6)), "[cpu] threads must be a whole number "
                                                                             "of threads, 0 (every core) to 65536, "
                                                                             "got 1000000"),
                         (replace(hw, gpu=None, link=None, cpu=None), NEEDS),
                         (replace(hw, link=None), NEEDS),
                         (replace(hw, gpu=None), "a link, a compute table and more GPUs ([link], [compute], [[gpu]]) "
                                                 "describe a GPU, and the machine has none"),
                         (replace(hw, more_gpus=(hw.gpu,)), "more_gpus must be a tuple of (GPU, Link) pairs, got "
                                                            f"({hw.gpu!r},)"),
                         (replace(hw, ssd="pcie5-nvme"), "ssd must be SSD or None, got str")):
        for run in (lambda: moesim.simulate(trace, hardware=bad, capacity=8),
                    lambda: moesim.serve(trace, hardware=bad, capacity=8, requests=2),
                    lambda: moesim.run_replay(trace, backend="virtual", hardware=bad, capacity=8)):
            with pytest.raises(MoesimError) as caught:
                run()
            assert str(caught.value) == f"hardware 'rtx4090': {message}"
    assert moesim.simulate(trace, hardware=hw, capacity=8).tpot_s == moesim.simulate(trace, hardware="rtx4090",
                                                                                    capacity=8).tpot_s


def test_a_machine_built_in_code_takes_the_settings_a_named_one_does():
    """``hardware=Hardware(...)`` with ``link``, ``vram``, ``ram``, ``cpu``, ``ssd``: each was accepted and read by
    nothing (a run on PCIe 4 reported as on PCIe 3); they change the object as they change a preset."""
    trace = moesim.load_trace("bundled")
    hw = moesim.hardware("rtx4090")
    for settings in ({"link": "pcie3"}, {"cpu": "grace"}, {"ssd": "pcie5-nvme", "dram_capacity": 64},
                     {"vram": 30, "ram": 200}):
        named, built = (moesim.simulate(trace, hardware=h, capacity=4, dtype="int4", **settings)
                        for h in ("rtx4090", hw))
        assert (built.tpot_s, built.vram_limit_gb, built.ram_limit_gb) == (named.tpot_s, named.vram_limit_gb,
                                                                           named.ram_limit_gb), settings
    assert moesim.simulate(trace, hardware=hw, capacity=4, dtype="int4", link="pcie3").tpot_s != \
        moesim.simulate(trace, hardware=hw, capacity=4, dtype="int4").tpot_s
    for h in ("rtx4090", hw):
        with pytest.raises(DoesNotFit):
            moesim.simulate(trace, hardware=h, capacity=4, dtype="int4", vram=8)
    served = [moesim.serve(trace, hardware=h, dtype="q4_k", rate=1.0, link="pcie3").summary["tpot_s"]
              for h in ("rtx4090", hw)]
    replayed = [moesim.run_replay(trace, backend="virtual", hardware=h, capacity=4, dtype="q4_k", link="pcie3").tpot_s
                for h in ("rtx4090", hw)]
    assert served[0] == served[1] and replayed[0] == replayed[1]


def test_a_model_built_in_code_is_checked_as_presets_are():
    """``model=dataclasses.replace(preset, ...)``: a negative width gave negative GPU memory, a NaN one a wrong
    cause, experts or top-k unlike the trace's ran on; each is refused naming the field."""
    trace = moesim.load_trace("bundled")
    spec = moesim.models()["mixtral-8x7b"]
    for changes, message in (({"d_model": -4096}, "model 'mixtral-8x7b': d_model must be a whole number >= 1, got "
                                                  "-4096"),
                             ({"d_model": 4096.5}, "model 'mixtral-8x7b': d_model must be a whole number >= 1, got "
                                                   "4096.5"),
                             ({"d_expert": math.nan}, "model 'mixtral-8x7b': d_expert must be a whole number >= 1, "
                                                      "got nan"),
                             ({"shared_experts": -1}, "model 'mixtral-8x7b': shared_experts must be a whole number "
                                                      ">= 0, got -1"),
                             ({"stored_expert_bytes": math.inf}, "model 'mixtral-8x7b': stored_expert_bytes must be "
                                                                 "a finite number >= 0 (0: priced from the run's "
                                                                 "dtype), got inf"),
                             ({"ffn_mats": 4}, "model 'mixtral-8x7b': ffn_mats must be 3 (SwiGLU: gate, up, down) or "
                                               "2 (a GELU MLP), got 4"),
                             ({"top_k": 9}, "model 'mixtral-8x7b': top_k 9 is more than its 8 experts"),
                             ({"ffn_mats": 3.0}, "model 'mixtral-8x7b': ffn_mats must be 3 (SwiGLU: gate, up, down) "
                                                 "or 2 (a GELU MLP), got 3.0"),
                             ({"architecture": None}, "model 'mixtral-8x7b': architecture must be a string, got None"),
                             ({"tied_embeddings": "no"}, "model 'mixtral-8x7b': tied_embeddings must be True or False, "
                                                         "got 'no'"),
                             ({"expert_mix": "x"}, "model 'mixtral-8x7b': expert_mix must be a tuple of (format, "
                                                   "share of the bytes) pairs, got 'x'"),
                             ({"top_k": 3}, "model mixtral-8x7b has (layers, experts, top_k) = (32, 8, 3), the trace "
                                            "(32, 8, 2)"),
                             ({"num_experts": 16}, "model mixtral-8x7b has (layers, experts, top_k) = (32, 16, 2), the "
                                                   "trace (32, 8, 2)")):
        with pytest.raises(MoesimError) as refused:
            moesim.simulate(trace, model=replace(spec, **changes), capacity=4, dtype="int4")
        assert str(refused.value) == message
    for preset in moesim.models().values():  # every preset passes the check it is the pattern of
        check_model(preset, preset.name)
    assert moesim.simulate(trace, model=spec, capacity=4, dtype="int4").tpot_s == \
        moesim.simulate(trace, capacity=4, dtype="int4").tpot_s


def test_a_machine_at_every_bound_gives_finite_times_without_a_warning(tmp_path):
    """The ends of the ranges, all at once, the slow way: finite TPOTs and memory limits, no NumPy warning (the sizes
    of 1e6 GiB are far past every real part's: taken with force, each warned of)."""
    slow = {"hbm_gbps = 360 ": "hbm_gbps = 0.001 ", "tflops = 25.6 ": "tflops = 1e-6 ",
            "# mem_eff = 0.8 ": "mem_eff = 0.001 ", "# flop_eff = 0.6 ": "flop_eff = 0.001 ",
            "# launch_us = 5 ": "launch_us = 1e6 ", "gbps = 32 ": "gbps = 0.001 ",
            "# efficiency = 0.8 ": "efficiency = 0.001 ", "# latency_us = 10 ": "latency_us = 1e6 ",
            "ghz = 4.2 ": "ghz = 0.01 ", "dram_gbps = 51.2 ": "dram_gbps = 0.001 ", "# dram_eff = 0.73 ": "dram_eff = 0.001 ",
            "# kernel_eff = 0.5 ": "kernel_eff = 0.001 ", "# sync_us = 113 ": "sync_us = 1e6 ",
            "# task_us = 0 ": "task_us = 1e6 ", "hbm_gb = 12 ": "hbm_gb = 1e6 ", "ram_gb = 32 ": "ram_gb = 1e6 "}
    text = TEMPLATE
    for old, new in slow.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "slow.toml"
    path.write_text(text)
    with pytest.warns(MoesimWarning) as shown:
        hw = load_hardware(path, force=True)
    assert [str(w.message).split("] ")[1].split(" is ")[0] for w in shown] == ["hbm_gb = 1000000", "ram_gb = 1000000"]
    trace = moesim.synth_trace(16, 64, 8, sequences=1, tokens=2, seed=0, prompt_tokens=2, model="olmoe-1b-7b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for strategy in ("gpu-cache", "hybrid"):
            r = moesim.simulate(trace, hardware=hw, strategy=strategy, capacity=8, dtype="q8_0", force=True).as_dict()
            assert math.isfinite(r["tpot_s"]) and r["tpot_s"] > 0 and r["vram_limit_gb"] == 1e6, (strategy, r)


# --- 3. config.json fields read as transformers reads them ------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"num_key_value_heads": 0}, "num_key_value_heads must be a whole number in 1..2147483647, got 0"),
    ({"num_key_value_heads": 64}, "num_key_value_heads must divide num_attention_heads 32 (each KV head serves an "
                                  "equal group of query heads), got 64"),
    ({"num_key_value_heads": 3}, "num_key_value_heads must divide num_attention_heads 32 (each KV head serves an "
                                 "equal group of query heads), got 3"),
    ({"mlp_only_layers": "0,1"}, 'mlp_only_layers must be a list of layer indices 0..3, got "0,1"'),
    ({"mlp_only_layers": [True]}, "mlp_only_layers must be a list of layer indices 0..3, got [true]"),
    ({"decoder_sparse_step": 0}, "decoder_sparse_step must be a whole number in 1..2147483647, got 0"),
])
def test_config_json_fields_read_wrong_are_refused(cli, tmp_path, monkeypatch, changes, message):
    monkeypatch.chdir(tmp_path)
    path = config(tmp_path, **changes)
    with pytest.raises(MoesimError) as caught:
        get_model(path)
    assert str(caught.value) == f"{path}: {message}"
    assert one_line_error(cli, "plan", "--model", path, "--hardware", "rtx4090") == f"{path}: {message}"


def test_config_json_fields_as_transformers_defaults_them(tmp_path, monkeypatch):
    """Absent or null: KV heads one per attention head, no MLP-only layers; a list of them makes dense layers."""
    monkeypatch.chdir(tmp_path)
    assert get_model(config(tmp_path, "a", num_key_value_heads=None)).kv_dim == 32 * 128
    assert get_model(config(tmp_path, "b", mlp_only_layers=None)).dense_layers == 0
    m = get_model(config(tmp_path, "c", mlp_only_layers=[0, 1]))
    assert (m.num_layers, m.dense_layers, m.kv_dim) == (2, 2, 4 * 128)
    # an index no layer has is never met, as in transformers (``layer_idx not in mlp_only_layers``)
    assert get_model(config(tmp_path, "d", mlp_only_layers=[0, 4, -1])).dense_layers == 1


# --- 4. the model table's int4 column -------------------------------------------------------------------------

def test_the_model_table_says_its_int4_column_counts_scales(cli):
    code, out, _ = cli("models")
    assert code == 0 and "4-bit without scales" not in out
    assert "int4 = 4.125 bits a weight, an fp16 scale per 128 included" in " ".join(out.split())
    code, out, _ = cli("models", "--json")
    mixtral = next(row for row in json.loads(out) if row["name"] == "mixtral-8x7b")
    assert mixtral["expert_mb_int4"] == 3 * 4096 * 14336 * 4.125 / 8 / 1e6 == 90.832896


# --- 5. a truncated GGUF -------------------------------------------------------------------------------------

def test_a_truncated_gguf_is_called_truncated(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("trunc.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    Path("other.gguf").write_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(MoesimError) as caught:
        get_model("trunc.gguf")
    assert str(caught.value) == "trunc.gguf: truncated GGUF file: 8 of its header's 24 bytes"
    assert one_line_error(cli, "plan", "--model", "trunc.gguf", "--hardware", "rtx4090") == \
        "trunc.gguf: truncated GGUF file: 8 of its header's 24 bytes"
    with pytest.raises(MoesimError) as caught:
        get_model("other.gguf")
    assert str(caught.value) == "other.gguf: not a GGUF file (no GGUF magic)"


# --- 6. names and top-level keys of a hardware file ------------------------------------------------------------

def test_a_hardware_files_name_and_top_level_keys(cli, tmp_path):
    path = template_with(tmp_path, 'name = "my-desktop"', "name = 5")
    assert one_line_error(cli, "hardware", "--show", path) == f"{path}: name must be a string, got 5"
    path = template_with(tmp_path, 'name = "my-desktop"', 'name = "my-desktop"\nfoo = 3', "foo.toml")
    assert one_line_error(cli, "hardware", "--show", path) == (
        f"{path}: unknown top-level key(s) foo (known: name, and a preset's name for gpu, link, ssd, cpu)")
    path = template_with(tmp_path, 'name = "my-desktop"', 'name = "my-desktop"\n[foo]\nx = 1', "table.toml")
    assert one_line_error(cli, "hardware", "--show", path) == (
        f"{path}: unknown section(s) foo (known: gpu, link, ssd, cpu, compute)")
    path = template_with(tmp_path, 'name = "RTX 3060 12GB"', "name = [1, 2]", "gpu.toml")
    assert one_line_error(cli, "hardware", "--show", path) == f"{path}: [gpu] name must be a string, got [1, 2]"
