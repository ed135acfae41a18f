"""Fuzzing every reader: valid files of each kind, mutated (bytes flipped, truncated, fields removed,
retyped or out of range), have exactly two outcomes — a valid trace or result, or a one-line
``MoesimError`` — never another exception and never a hang (each case has a time limit).

The budget (``EXAMPLES`` per reader, seeded by hypothesis's database-free derandomised runs) keeps CI
bounded; ``MOESIM_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py`` runs a longer campaign.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import signal
import tempfile
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError

EXAMPLES = int(os.environ.get("MOESIM_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ODD_VALUES = [None, -1, 0, 1, 2 ** 40, -2 ** 40, 1.5, -0.5, math.nan, math.inf, -math.inf, 1e300, True, False, "",
              "x", "12", [], [1], {}, {"a": 1}]
TIME_LIMIT_S = 60


@contextmanager
def time_limit(seconds: int = TIME_LIMIT_S):
    """Fail, rather than hang, a case that runs too long. The alarm it replaces (pytest-timeout's, the whole test's)
    is set again after, less the time the case took."""
    def expired(*_):
        raise TimeoutError(f"no outcome within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


def test_a_case_s_time_limit_gives_the_test_s_own_alarm_back():
    """pytest-timeout's alarm (here one of 100 s) outlives a case's limit, less the time the case took; before, the
    case's limit cancelled it, and the rest of a fuzz test ran with none."""
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 100)
    try:
        with time_limit(60):
            assert 59 < signal.getitimer(signal.ITIMER_REAL)[0] <= 60
        assert 99 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


SEEN: dict = defaultdict(Counter)  # reader (its test) -> how many cases read and how many were refused


def outcome(fn, limit: int = TIME_LIMIT_S):
    """``fn()``'s result, or None after a one-line MoesimError; any other exception fails the test. Counts
    the outcome for the reader whose test runs (``SEEN``)."""
    reader = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[-1].split("[")[0].split(" ")[0].split("@")[0]
    with time_limit(limit):
        try:
            result = fn()
        except MoesimError as exc:
            assert str(exc) and "\n" not in str(exc).strip(), repr(exc)
            SEEN[reader]["refused"] += 1
            return None
    SEEN[reader]["read"] += 1
    return result


def mutate_bytes(data: bytes, draw) -> bytes:
    """Flip a few bytes, truncate, or both."""
    data = bytearray(data)
    for _ in range(draw(st.integers(0, 8))):
        if data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


def mutate_mapping(base: dict, draw, extra_keys=("surprise",)) -> dict:
    """Remove, retype or set out of range a few fields of a (nested) mapping."""
    out = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        table = out
        while True:  # descend into a nested table now and then
            keys = sorted(table) + list(extra_keys)
            key = draw(st.sampled_from(keys))
            if isinstance(table.get(key), dict) and draw(st.booleans()):
                table = table[key]
                continue
            break
        if key in table and draw(st.integers(0, 4)) == 0:
            del table[key]
        else:
            table[key] = copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))  # never mutate the shared ones
    return out


def _folder():
    return tempfile.TemporaryDirectory(prefix="moesim-fuzz-")


# --- trace files -------------------------------------------------------------------------------------

def _valid_trace_bytes() -> bytes:
    from moesim.tracegen.io import write_trace
    from moesim.tracegen.synth import synth_trace

    with _folder() as tmp:
        path = Path(tmp) / "t.parquet"
        write_trace(synth_trace(3, 8, 2, 2, 5, seed=1, prompt_tokens=2), path)
        return path.read_bytes()


TRACE_BYTES = _valid_trace_bytes()


def _check_loaded(trace) -> None:
    if trace is not None:
        assert trace.experts.shape[1:] == (trace.meta.num_layers, trace.meta.top_k)
        assert trace.experts.min() >= 0 and trace.experts.max() < trace.meta.num_experts


@FUZZ
@given(data=st.data())
def test_trace_file_bytes(data):
    from moesim.tracegen.io import load_trace

    with _folder() as tmp:
        path = Path(tmp) / "t.parquet"
        path.write_bytes(mutate_bytes(TRACE_BYTES, data.draw))
        _check_loaded(outcome(lambda: load_trace(path)))


@FUZZ
@given(data=st.data())
def test_trace_metadata(data):
    from moesim.tracegen.io import load_trace
    from moesim.tracegen.schema import METADATA_KEY

    frame = pl.read_parquet(io.BytesIO(TRACE_BYTES))
    meta = json.loads(pl.read_parquet_metadata(io.BytesIO(TRACE_BYTES))[METADATA_KEY])
    text = json.dumps(mutate_mapping(meta, data.draw)) if data.draw(st.integers(0, 5)) else \
        data.draw(st.sampled_from(["[]", "null", "3", '"x"', "{", '{"num_layers": 3}', "{}"]))
    with _folder() as tmp:
        path = Path(tmp) / "t.parquet"
        frame.write_parquet(path, metadata={METADATA_KEY: text})
        _check_loaded(outcome(lambda: load_trace(path)))


@FUZZ
@given(data=st.data())
def test_trace_columns(data):
    from moesim.tracegen.io import load_trace
    from moesim.tracegen.schema import METADATA_KEY

    frame = pl.read_parquet(io.BytesIO(TRACE_BYTES))
    meta = pl.read_parquet_metadata(io.BytesIO(TRACE_BYTES))[METADATA_KEY]
    column = data.draw(st.sampled_from(frame.columns))
    action = data.draw(st.sampled_from(["drop", "null", "negate", "string", "shuffle", "empty"]))
    if action == "drop":
        frame = frame.drop(column)
    elif action == "null":
        frame = frame.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(None).otherwise(pl.col(column))
                                   .alias(column))
    elif action == "negate" and frame[column].dtype.is_integer():
        frame = frame.with_columns(-pl.col(column))
    elif action == "string":
        listed = isinstance(frame[column].dtype, pl.List)
        frame = frame.with_columns(pl.col(column).cast(pl.List(pl.String) if listed else pl.String))
    elif action == "shuffle":
        frame = frame.sample(fraction=1.0, shuffle=True, seed=data.draw(st.integers(0, 99)))
    elif action == "empty":
        frame = frame.head(0)
    with _folder() as tmp:
        path = Path(tmp) / "t.parquet"
        frame.write_parquet(path, metadata={METADATA_KEY: meta})
        _check_loaded(outcome(lambda: load_trace(path)))


# --- importers -----------------------------------------------------------------------------------------

VLLM = "\n".join(json.dumps({"dataset": "d", "problem_id": p, "layer": layer, "experts": [layer % 8, (layer + 3) % 8],
                             "gating_probs": [0.7, 0.3], "token_idx": t})
                 for p in range(2) for t in range(3) for layer in range(4)) + "\n"
CSV = "seq,step,layer,e0,e1\n" + "".join(f"{s},{t},{layer},{layer % 8},{(layer + 5) % 8}\n"
                                          for s in range(2) for t in range(3) for layer in range(4))


@FUZZ
@given(data=st.data(), fmt=st.sampled_from(["vllm-jsonl", "csv"]))
def test_importers(data, fmt):
    from moesim.tracegen.importers import import_trace
    from moesim.tracegen.io import load_trace

    text = (VLLM if fmt == "vllm-jsonl" else CSV).encode()
    if data.draw(st.booleans()):
        lines = text.splitlines(keepends=True)
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(lines) - 1))
            lines[i] = data.draw(st.sampled_from([b"", b"\n", lines[i] * 2, lines[i][:5] + b"\n", b"{}\n", b"[1]\n",
                                                  b"1,2\n", lines[i].replace(b"3", b"-3"), b"\xff\xfe\n"]))
        text = b"".join(lines)
    else:
        text = mutate_bytes(text, data.draw)
    with _folder() as tmp:
        src, out = Path(tmp) / "log", Path(tmp) / "t.parquet"
        src.write_bytes(text)
        result = outcome(lambda: import_trace(src, fmt, out, data.draw(st.sampled_from([None, "mixtral-8x7b"]))))
        if result is None:
            assert not out.exists()
        else:
            _check_loaded(load_trace(out))


def _sglang_log() -> str:
    """Two /generate responses as SGLang writes them for DeepSeek-V2-Lite (27 layers, the first dense, top-6)."""
    import base64

    rng = np.random.default_rng(0)
    lines = []
    for rid, prompt, completion in (("a", 3, 2), ("b", 2, 3)):
        ids = np.zeros((prompt + completion - 1, 27, 6), np.int32)
        for pos in range(ids.shape[0]):
            for layer in range(1, 27):
                ids[pos, layer] = rng.choice(64, 6, replace=False)
        lines.append(json.dumps({"text": "...", "meta_info": {"id": rid, "prompt_tokens": prompt,
                                 "completion_tokens": completion,
                                 "routed_experts": base64.b64encode(ids.tobytes()).decode()}}))
    return "\n".join(lines) + "\n"


SGLANG = _sglang_log()


@FUZZ
@given(data=st.data())
def test_sglang_logs(data):
    from moesim.tracegen.importers import import_trace
    from moesim.tracegen.io import load_trace

    records = [json.loads(line) for line in SGLANG.splitlines()]
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(records) - 1))
        records[i] = mutate_mapping(records[i], data.draw, ("meta_info",))
        text = "\n".join(json.dumps(r, allow_nan=True) for r in records).encode()
    else:
        text = mutate_bytes(SGLANG.encode(), data.draw)
    with _folder() as tmp:
        src, out = Path(tmp) / "responses.jsonl", Path(tmp) / "t.parquet"
        src.write_bytes(text)
        result = outcome(lambda: import_trace(src, "sglang", out, "deepseek-v2-lite"))
        if result is None:
            assert not out.exists()
        else:
            _check_loaded(load_trace(out))


# --- hardware, sweep specs, configurations --------------------------------------------------------------

HARDWARE = {"name": "box", "gpu": {"name": "G", "hbm_gbps": 1000.0, "tflops": 100.0, "hbm_gb": 24.0, "mem_eff": 0.8,
                                   "flop_eff": 0.6, "launch_us": 5.0},
            "link": {"name": "L", "gbps": 32.0, "efficiency": 0.8, "latency_us": 10.0, "engines": 2},
            "ssd": {"name": "S", "gbps": 7.0, "latency_us": 80.0},
            "cpu": {"name": "C", "cores": 8, "ghz": 4.0, "isa": "avx2", "dram_gbps": 50.0, "ram_gb": 64.0,
                    "dram_eff": 0.7, "kernel_eff": 0.5, "task_us": 5.0, "sync_us": 25.0, "core_gbps": 20.0,
                    "matmul_gflops": {"q8_0": 50.0}},
            "compute": {"name": "olmoe-1b-7b", "layer_s": 1e-4, "expert_s": 1e-5, "expert_token_s": 1e-7}}


def toml_text(value, prefix="") -> str:
    """A mapping as TOML (enough of it for these files: tables of scalars and lists)."""
    def scalar(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, (list, dict)):
            return json.dumps(v).replace(":", " =") if isinstance(v, dict) else "[" + ", ".join(map(scalar, v)) + "]"
        return json.dumps(v)

    plain = [f"{k} = {scalar(v)}" for k, v in value.items() if not isinstance(v, dict) and v is not None]
    tables = [f"\n[{prefix}{k}]\n" + toml_text(v, f"{prefix}{k}.") for k, v in value.items() if isinstance(v, dict)]
    return "\n".join(plain) + "\n" + "".join(tables)


@FUZZ
@given(data=st.data())
def test_hardware_files(data):
    from moesim import simulate
    from moesim.sim.hardware import load_hardware
    from moesim.tracegen.synth import synth_trace

    with _folder() as tmp:
        path = Path(tmp) / "hw.toml"
        path.write_text(toml_text(mutate_mapping(HARDWARE, data.draw)))
        hw = outcome(lambda: load_hardware(path))
        if hw is not None:  # a machine that loads gives finite, positive times
            trace = synth_trace(16, 64, 8, 1, 3, seed=0, model="olmoe-1b-7b")
            r = outcome(lambda: simulate(trace, hardware=hw, policy="lru", capacity=8))
            assert r is None or (math.isfinite(r.tpot_s) and r.tpot_s > 0)
            r = outcome(lambda: simulate(trace, hardware=hw, strategy="hybrid", capacity=8, dtype="q8_0"))
            assert r is None or (math.isfinite(r.tpot_s) and r.tpot_s > 0 and r.vram_gb > 0)


@FUZZ
@given(data=st.data())
def test_hardware_files_with_several_gpus(data):
    """[[gpu]] and [[link]] lists: their counts, and their tables mutated; a machine that loads places whole layers
    over its GPUs with finite, positive times."""
    from moesim import simulate
    from moesim.sim.hardware import load_hardware
    from moesim.tracegen.synth import synth_trace

    gpus = [mutate_mapping(HARDWARE["gpu"], data.draw) if data.draw(st.booleans()) else HARDWARE["gpu"]
            for _ in range(data.draw(st.integers(0, 3)))]
    links = [mutate_mapping(HARDWARE["link"], data.draw) if data.draw(st.booleans()) else HARDWARE["link"]
             for _ in range(data.draw(st.sampled_from([1, 2, len(gpus)])))]
    machine = {"name": "box", "gpu": gpus, "link": links[0] if len(links) == 1 else links, "cpu": HARDWARE["cpu"]}
    with _folder() as tmp:
        path = Path(tmp) / "hw.toml"
        path.write_text(toml_text(machine))
        hw = outcome(lambda: load_hardware(path))
        if hw is not None:
            trace = synth_trace(16, 64, 8, 1, 3, seed=0, model="olmoe-1b-7b")
            r = outcome(lambda: simulate(trace, hardware=hw, strategy="cpu-experts", cpu_layers="auto",
                                         dtype="q8_0"))
            assert r is None or (math.isfinite(r.tpot_s) and r.tpot_s > 0 and r.vram_gb > 0)


@FUZZ
@given(data=st.data())
def test_gguf_model_files(data):
    """A GGUF file's header, bytes flipped or cut: a model whose every dimension is a positive number, or an
    error naming the file."""
    pytest.importorskip("gguf")
    from ggufs import write_gguf
    from moesim.tracegen.models import get_model

    with _folder() as tmp:
        path = Path(tmp) / "m.gguf"
        write_gguf(path)
        path.write_bytes(mutate_bytes(path.read_bytes()[:4096], data.draw) + path.read_bytes()[4096:]
                         if data.draw(st.booleans()) else mutate_bytes(path.read_bytes(), data.draw))
        m = outcome(lambda: get_model(str(path)))
        if m is not None:
            assert min(m.num_layers, m.num_experts, m.top_k, m.d_model, m.d_expert) >= 1 and m.top_k <= m.num_experts
            assert m.stored_expert_bytes > 0 and m.stored_other_bytes > 0 and m.non_expert_params > 0


CONFIG_JSON = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_experts": 128,
               "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
               "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
               "decoder_sparse_step": 1, "mlp_only_layers": [], "kv_lora_rank": None, "n_shared_experts": None}


@FUZZ
@given(data=st.data())
def test_config_json_model_files(data):
    """A transformers config.json, fields removed, retyped or out of range, or its bytes damaged: a model
    whose every dimension is a positive number, or an error naming the file."""
    from moesim.tracegen.models import get_model

    with _folder() as tmp:
        path = Path(tmp) / "config.json"
        text = json.dumps(mutate_mapping(CONFIG_JSON, data.draw, ("surprise", "num_local_experts",
                                                                   "first_k_dense_replace", "qk_rope_head_dim")))
        path.write_text(text if data.draw(st.integers(0, 4)) else mutate_bytes(text.encode(), data.draw)
                        .decode("utf-8", "replace"))
        m = outcome(lambda: get_model(str(path)))
        if m is not None:
            assert min(m.num_layers, m.num_experts, m.top_k, m.d_model, m.d_expert) >= 1 and m.top_k <= m.num_experts
            assert m.non_expert_params > 0 and m.expert_params > 0 and m.kv_width > 0


SPEC = {"traces": ["bundled"], "kind": "hitrate", "axes": {"policy": ["lru", "gamma"], "capacity": [2, 4]},
        "fixed": {"scope": "per-layer", "gamma": 0.5}}


@FUZZ
@given(data=st.data())
def test_sweep_specs(data):
    from moesim.experiments.sweep import load_spec

    with _folder() as tmp:
        path = Path(tmp) / "s.toml"
        path.write_text(toml_text(mutate_mapping(SPEC, data.draw, ("traces", "kind", "axes", "fixed", "exclude")))
                        if data.draw(st.integers(0, 4)) else mutate_bytes(toml_text(SPEC).encode(), data.draw)
                        .decode("utf-8", "replace"))
        spec = outcome(lambda: load_spec(path))
        if spec is not None:
            assert isinstance(spec.configs(), list)


@FUZZ
@given(data=st.data())
def test_configuration_files(data):
    from moesim import Config

    base = {"cache": {"policy": "gamma", "capacity": 4, "params": {"gamma": 0.5}},
            "prefetch": {"prefetcher": "oracle", "mode": "commit"}, "workload": {"batch": 2, "context": 16},
            "hardware": {"machine": "h100", "link": "pcie4", "cpu": "grace", "vram": 40.0, "tensor_split": [3, 1]},
            "execution": {"strategy": "lowbit-miss", "params": {"lowbit_threshold": 0.25, "lowbit_dtype": "int2"}}}
    with _folder() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(toml_text(mutate_mapping(base, data.draw, ("cache", "surprise"))))
        config = outcome(lambda: Config.from_toml(path))
        if config is not None:
            assert Config.build(**config.flat()) == config


# --- model files and prompts ------------------------------------------------------------------------------

def _model_arrays(e=4, hidden=8, m=1) -> dict:
    rng = np.random.default_rng(0)
    return {"w1": rng.normal(size=(m, 2 * e, hidden)).astype(np.float32), "b1": np.zeros((m, hidden), np.float32),
            "w2": rng.normal(size=(m, hidden, hidden)).astype(np.float32), "b2": np.zeros((m, hidden), np.float32),
            "w3": rng.normal(size=(m, hidden, e)).astype(np.float32), "b3": np.zeros((m, e), np.float32),
            "num_experts": np.int64(e), "horizon": np.int64(64), "per_layer": np.bool_(False)}


def _npz(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@FUZZ
@given(data=st.data())
def test_ml_ffn_model_files(data):
    from moesim import hitrate
    from moesim.policies.ml_ffn import load_model
    from moesim.tracegen.synth import synth_trace

    arrays = _model_arrays()
    kind = data.draw(st.sampled_from(["bytes", "shape", "dtype", "missing", "nan", "npy", "empty"]))
    name = data.draw(st.sampled_from(sorted(arrays)))
    if kind == "shape":
        arrays[name] = np.zeros(data.draw(st.sampled_from([(), (1,), (1, 3), (2, 8, 8), (1, 9, 8)])), np.float32)
    elif kind == "dtype":
        arrays[name] = arrays[name].astype(data.draw(st.sampled_from([np.int8, np.float64, np.bool_, np.uint16])))
    elif kind == "missing":
        del arrays[name]
    elif kind == "nan" and arrays[name].dtype.kind == "f":
        arrays[name] = np.full_like(arrays[name], np.nan)
    raw = _npz(arrays)
    if kind == "bytes":
        raw = mutate_bytes(raw, data.draw)
    elif kind == "npy":
        buf = io.BytesIO()
        np.save(buf, arrays.get("w1", np.zeros(3)))
        raw = buf.getvalue()
    elif kind == "empty":
        raw = b""
    with _folder() as tmp:
        path = Path(tmp) / "ffn.npz"
        path.write_bytes(raw)
        if outcome(lambda: load_model(path)) is not None:  # a model that loads runs
            trace = synth_trace(2, 4, 2, 1, 6, seed=0)
            assert outcome(lambda: hitrate(trace, "ml-ffn", 2, ml_model=str(path))) is not None


@FUZZ
@given(data=st.data(), suffix=st.sampled_from([".txt", ".jsonl"]))
def test_prompt_files(data, suffix):
    from moesim.tracegen.record import read_prompts

    base = ('{"prompt": "a", "id": "x"}\n{"prompt": "b"}\n' if suffix == ".jsonl" else "one\ntwo\n").encode()
    with _folder() as tmp:
        path = Path(tmp) / f"p{suffix}"
        path.write_bytes(mutate_bytes(base, data.draw) if data.draw(st.booleans())
                         else data.draw(st.binary(max_size=64)))
        prompts = outcome(lambda: read_prompts(path))
        assert prompts is None or (prompts and all(isinstance(k, str) and p for k, p in prompts))


@FUZZ
@given(data=st.data(), suffix=st.sampled_from([".csv", ".parquet"]))
def test_arrival_files(data, suffix):
    from moesim.sim.config import Config
    from moesim.sim.scheduler import read_arrivals
    from moesim.sim.serve import simulate_serve
    from moesim.tracegen.schema import TraceMeta
    from moesim.tracegen.synth import synth_trace

    frame = pl.DataFrame({"arrival_s": [0.0, 0.5, 2.0], "seq": [1, 0, 1]})
    with _folder() as tmp:
        path = Path(tmp) / f"a{suffix}"
        if suffix == ".csv":
            frame.write_csv(path)
        else:
            frame.write_parquet(path)
        path.write_bytes(mutate_bytes(path.read_bytes(), data.draw) if data.draw(st.booleans())
                         else data.draw(st.binary(max_size=64)))
        got = outcome(lambda: read_arrivals(str(path), 2))
        if got is not None:  # arrivals that read serve
            arrival, seq = got
            assert np.isfinite(arrival).all() and (arrival >= 0).all() and (seq is None or seq.max() < 2)
            meta = TraceMeta(num_layers=2, num_experts=4, top_k=2, model="toy", d_model=256, d_expert=512)
            trace = synth_trace(2, 4, 2, 2, 3, seed=0, meta=meta)
            result = outcome(lambda: simulate_serve(trace, Config.build(arrivals=str(path), capacity=2)))
            assert result is not None and result.requests.height == arrival.size


def test_the_harness_fails_what_is_not_a_one_line_error():
    """A reader that raises anything but a one-line MoesimError, or hangs, fails its test."""
    with pytest.raises(ValueError):
        outcome(lambda: int("x"))
    with pytest.raises(AssertionError):
        outcome(lambda: (_ for _ in ()).throw(MoesimError("two\nlines")))
    with pytest.raises(TimeoutError):
        outcome(lambda: signal.pause(), limit=1)
    assert outcome(lambda: 7) == 7
    SEEN.pop("test_the_harness_fails_what_is_not_a_one_line_error")  # not a reader


def test_each_reader_gets_the_stated_budget_of_cases():
    """``FUZZ`` runs ``EXAMPLES`` cases (the README and the note quote the number)."""
    cases = []

    @FUZZ
    @given(st.integers())
    def probe(value):
        cases.append(value)

    probe()
    assert len(cases) == EXAMPLES


def test_every_reader_met_input_it_read_and_input_it_refused():
    """Over its cases each reader fuzzed above both read something and refused something: mutations that
    never break a file, or never leave one readable, test nothing. (Runs after them, in file order.)"""
    readers = [name for name in SEEN if name.startswith("test_")]
    if not readers:
        pytest.skip("run with the readers' tests")
    assert {name: dict(SEEN[name]) for name in readers if min(SEEN[name]["read"], SEEN[name]["refused"]) == 0} == {}


# one worker runs them all, in file order (--dist loadgroup; xdist names them test_x@fuzz), so the last test sees
# every reader's counts
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.xdist_group("fuzz")]
