"""Importers: the real vLLM log, CSV tables, and the errors a malformed log gets."""

import base64
import json

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.tracegen.importers import import_trace
from moesim.tracegen.io import load_trace
from moesim.tracegen.trace import bundled_trace_path


def test_real_mixtral_log(tmp_path, shared_jsonl):
    summary, dropped = import_trace(shared_jsonl, "vllm-jsonl", tmp_path / "t.parquet", model="mixtral-8x7b")
    trace = load_trace(tmp_path / "t.parquet")
    assert (summary.num_sequences, summary.num_rows, summary.meta) == (2, trace.num_rows, trace.meta)
    m = trace.meta
    assert (m.num_layers, m.num_experts, m.top_k) == (32, 8, 2)
    # problem 0 lacks layers of tokens 166 and 167, problem 1 of token 78: 81 records, 3 tokens
    assert dropped == 3 and m.dropped_tokens == 3
    assert trace.num_sequences == 2 and trace.decode_steps == 166 + 78 and trace.prefill_steps == 0
    assert m.sequence_keys == ["gsm8k/0", "gsm8k/1"]
    assert m.expert_bytes == 3 * 4096 * 14336 * 2
    assert trace.experts[0, 0].tolist() == [7, 0]  # first record of the log
    np.testing.assert_allclose(trace.weights[0, 0], [0.8003801107406616, 0.19961987435817719], rtol=1e-6)


def test_bundled_trace_is_the_real_log_converted(tmp_path, shared_jsonl):
    import_trace(shared_jsonl, "vllm-jsonl", tmp_path / "t.parquet", model="mixtral-8x7b")
    fresh = load_trace(tmp_path / "t.parquet")
    shipped = load_trace(bundled_trace_path())
    np.testing.assert_array_equal(fresh.experts, shipped.experts)
    np.testing.assert_array_equal(fresh.weights, shipped.weights)
    assert fresh.meta.replace(tool_version="") == shipped.meta.replace(tool_version="")


def test_batches_do_not_change_the_result(tmp_path, shared_jsonl):
    import_trace(shared_jsonl, "vllm-jsonl", tmp_path / "a.parquet")
    import_trace(shared_jsonl, "vllm-jsonl", tmp_path / "b.parquet", batch_lines=1000)
    whole, small = load_trace(tmp_path / "a.parquet"), load_trace(tmp_path / "b.parquet")
    np.testing.assert_array_equal(whole.experts, small.experts)
    assert whole.meta.num_experts == 8 and whole.meta.model == "unknown"  # dims inferred without --model


def _jsonl(path, records, raw_lines=()):
    lines = [json.dumps(r) for r in records] + list(raw_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def _records(tokens=2, layers=2, problem=0):
    return [{"dataset": "d", "problem_id": problem, "layer": l, "experts": [l % 8, (l + 1) % 8],
             "gating_probs": [0.6, 0.4], "token_idx": t} for l in range(layers) for t in range(tokens)]


def _token(step, bad_layer=None, layers=32):
    return [{"dataset": "d", "problem_id": 0, "layer": l, "experts": [1, 9 if l == bad_layer else 2], "token_idx": step}
            for l in range(layers)]


FULL = _records(tokens=2, layers=32)  # lines 1-64


@pytest.mark.parametrize("records, raw, message", [
    (FULL, ['{"problem_id": 0, "layer": 1, "experts": [1, 2], "token_idx": 9'], ":65: not JSON"),
    (FULL, ['{"problem_id": 0, "layer": "one", "experts": [1, 2], "token_idx": 9}'], ''':65: 'layer' is "one"'''),
    (FULL, ['{"problem_id": 0, "layer": 1, "token_idx": 9}'], ":65: missing field 'experts'"),
    (FULL, ['{"problem_id": 0, "layer": 1, "experts": [1, 2]}'], ":65: missing field 'token_idx or token_pos'"),
    (FULL + _token(2, bad_layer=3), [], "line 68 (seq 0, step 2, layer 3): expert 9 out of range 0..7"),
    (FULL + _token(2, layers=1) + _token(0, layers=1), [], "line 66: seq 0 step 0: layer 0 appears twice"),
    (FULL + _token(2)[:5] + [{"dataset": "d", "problem_id": 0, "layer": 40, "experts": [1, 2], "token_idx": 2}], [],
     "line 70: layer 40 out of range 0..31"),
])
def test_malformed_logs_name_the_line(tmp_path, records, raw, message):
    src = _jsonl(tmp_path / "log.jsonl", records, raw)
    with pytest.raises(MoesimError) as err:
        import_trace(src, "vllm-jsonl", tmp_path / "t.parquet", model="mixtral-8x7b")
    assert message in str(err.value) and str(src) in str(err.value)
    assert not (tmp_path / "t.parquet").exists()


def test_incomplete_tokens_are_dropped_and_counted(tmp_path):
    records = _records(tokens=3, layers=4) + _records(tokens=2, layers=4, problem=1)
    records = [r for r in records if not (r["problem_id"] == 0 and r["token_idx"] == 1 and r["layer"] == 2)]
    src = _jsonl(tmp_path / "log.jsonl", records)
    _, dropped = import_trace(src, "vllm-jsonl", tmp_path / "t.parquet")
    trace = load_trace(tmp_path / "t.parquet")
    assert dropped == 1 and trace.meta.dropped_tokens == 1
    assert trace.steps.tolist() == [0, 2, 0, 1] and trace.seq_offsets.tolist() == [0, 2, 4]


def test_csv_table(tmp_path):
    src = tmp_path / "t.csv"
    src.write_text("seq,step,layer,e0,e1\n"
                   "5,0,0,1,2\n5,0,1,3,0\n\n5,1,0,2,1\n5,1,1,0,3\n7,0,0,1,0\n7,0,1,2,3\n")
    _, dropped = import_trace(src, "csv", tmp_path / "t.parquet")
    trace = load_trace(tmp_path / "t.parquet")
    assert dropped == 0 and trace.meta.sequence_keys == ["5", "7"]
    assert (trace.meta.num_layers, trace.meta.num_experts, trace.meta.top_k) == (2, 4, 2)
    assert trace.experts[:, 1].tolist() == [[3, 0], [0, 3], [2, 3]]


@pytest.mark.parametrize("body, message", [
    ("seq,step,layer,e0,e1\n0,0,0,1,2\n0,0,1,x,2\n", ":3: 'x' is not an integer"),
    ("seq,step,layer,e0,e1\n0,0,0,1,2\n0,0,1,1,2,5\n", ":3: 6 fields, the header has 5"),
    ("seq,layer,e0\n0,0,1\n", ":1: header must name seq,step,layer"),
    # a column of another name was ignored: 'Phase' left every row decoding
    ("seq,step,layer,e0,e1,Phase\n0,0,0,1,2,0\n", ":1: unknown column.s. 'Phase'"),
    ("seq,step,layer,e0,e1,\n0,0,0,1,2,\n", ":1: unknown column.s. ''"),  # a spreadsheet's trailing comma
])
def test_malformed_csv(tmp_path, body, message):
    src = tmp_path / "t.csv"
    src.write_text(body)
    with pytest.raises(MoesimError, match=message):
        import_trace(src, "csv", tmp_path / "t.parquet")


def test_a_byte_order_mark_is_skipped(tmp_path):
    """A spreadsheet's CSV export starts with a UTF-8 byte-order mark: it was refused as a header that looked right
    ("got \ufeffseq,step,..."); a JSONL file's the same."""
    plain = tmp_path / "plain.csv"
    plain.write_text("seq,step,layer,e0,e1,phase\n0,0,0,1,2,0\n0,1,0,2,3,1\n")
    marked = tmp_path / "marked.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    import_trace(plain, "csv", tmp_path / "a.parquet")
    import_trace(marked, "csv", tmp_path / "b.parquet")
    a, b = load_trace(tmp_path / "a.parquet"), load_trace(tmp_path / "b.parquet")
    assert np.array_equal(a.experts, b.experts) and np.array_equal(a.phase, b.phase) and a.phase.tolist() == [0, 1]


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(MoesimError, match="unknown format 'xml'"):
        import_trace(tmp_path / "a", "xml", tmp_path / "t.parquet")
    with pytest.raises(MoesimError, match="no such file"):
        import_trace(tmp_path / "a", "csv", tmp_path / "t.parquet")


def _sglang_response(rng, prompt, completion, layers=27, dense=1, experts=64, k=6, rid="req-0", encode=True):
    """One /generate response as SGLang writes it: ids [positions, hidden layers, k], dense layers zero."""
    ids = np.zeros((prompt + completion - 1, layers, k), dtype=np.int32)
    for pos in range(ids.shape[0]):
        for layer in range(dense, layers):
            ids[pos, layer] = rng.choice(experts, size=k, replace=False)
    payload = base64.b64encode(ids.tobytes()).decode() if encode else ids.tolist()
    return {"text": "...", "meta_info": {"id": rid, "prompt_tokens": prompt, "completion_tokens": completion,
                                         "routed_experts": payload}}, ids[:, dense:]


def test_sglang_routed_experts(tmp_path):
    rng = np.random.default_rng(0)
    first, ids_a = _sglang_response(rng, 5, 4, rid="a")
    second, ids_b = _sglang_response(rng, 3, 6, rid="b", encode=False)  # nested lists are read too
    src = tmp_path / "responses.jsonl"
    src.write_text(json.dumps(first) + "\n\n" + json.dumps(second) + "\n")
    trace, dropped = import_trace(src, "sglang", tmp_path / "t.parquet", model="deepseek-v2-lite")
    back = load_trace(tmp_path / "t.parquet")
    assert dropped == 0 and back.meta.sequence_keys == ["a", "b"] and back.meta.num_layers == 26
    np.testing.assert_array_equal(back.experts, np.concatenate([ids_a, ids_b]).astype(np.int16))
    assert back.seq_offsets.tolist() == [0, 8, 16]
    assert back.phase.tolist() == [0] * 5 + [1] * 3 + [0] * 3 + [1] * 5
    assert back.steps.tolist() == list(range(8)) + list(range(8)) and back.weights is None
    assert back.meta.shared_experts == 2


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r["meta_info"].pop("routed_experts"), "responses.jsonl:1: no meta_info.routed_experts"),
    (lambda r: r["meta_info"].update(routed_experts="***"), "responses.jsonl:1: routed_experts is not base64"),
    (lambda r: r["meta_info"].update(prompt_tokens=7), "responses.jsonl:1: 1296 expert ids do not fill 10 positions x top-6"),
    (lambda r: r["meta_info"].update(routed_experts=base64.b64encode(
        np.full((8, 27, 6), 99, np.int32).tobytes()).decode()), "layers carry routing"),
    # a float id is not truncated to an expert (1.5 is not expert 1), nor is a bool one
    (lambda r: r["meta_info"].update(routed_experts=(np.zeros((8, 27, 6)) + 1.5).tolist()),
     "responses.jsonl:1: routed_experts is neither base64 nor a nested list of integers"),
    (lambda r: r["meta_info"].update(routed_experts=np.ones((8, 27, 6), bool).tolist()),
     "responses.jsonl:1: routed_experts is neither base64 nor a nested list of integers"),
    # a prompt length that is no whole number, or given alone, was dropped without a word (the trace all decode)
    (lambda r: r["meta_info"].update(prompt_tokens=5.0),
     "responses.jsonl:1: prompt_tokens and completion_tokens must be whole numbers, >= 0 and >= 1, got 5.0 and 4"),
    (lambda r: r["meta_info"].pop("completion_tokens"), "got 5 and None"),
    (lambda r: r["meta_info"].update(prompt_tokens=-2), "got -2 and 4"),
    (lambda r: r["meta_info"].update(expert_ids_schema={"moe_layer_ids": [1] * 26}),
     "responses.jsonl:1: moe_layer_ids must be a rising list of layer numbers 0..26"),
    (lambda r: r["meta_info"].update(expert_ids_schema={"top_k": "6"}), "top_k '6' in the response"),
])
def test_sglang_errors_name_the_line(tmp_path, mutate, message):
    record, _ = _sglang_response(np.random.default_rng(1), 5, 4)
    mutate(record)
    src = tmp_path / "responses.jsonl"
    src.write_text(json.dumps(record) + "\n")
    with pytest.raises(MoesimError, match=message):
        import_trace(src, "sglang", tmp_path / "t.parquet", model="deepseek-v2-lite")
    assert not (tmp_path / "t.parquet").exists()


def test_sglang_needs_a_model_and_checks_ranges(tmp_path):
    record, _ = _sglang_response(np.random.default_rng(2), 4, 2)
    src = tmp_path / "responses.jsonl"
    src.write_text(json.dumps(record) + "\n")
    with pytest.raises(MoesimError, match="needs --model"):
        import_trace(src, "sglang", tmp_path / "t.parquet")
    with pytest.raises(MoesimError, match="responses.jsonl:1: 78 of 81 layers carry routing, the model preset has 32"):
        import_trace(src, "sglang", tmp_path / "t.parquet", model="mixtral-8x7b")
    record, ids = _sglang_response(np.random.default_rng(2), 4, 2, experts=100)
    src.write_text(json.dumps(record) + "\n")
    pos, layer, _ = np.argwhere(ids >= 64)[0]
    with pytest.raises(MoesimError, match=f"responses.jsonl:1: position {pos}, MoE layer {layer}: expert .* out of range 0..63"):
        import_trace(src, "sglang", tmp_path / "t.parquet", model="deepseek-v2-lite")


def test_vllm_phase_field(tmp_path):
    rows = [{"problem_id": 0, "layer": l, "experts": [l, l + 1], "token_idx": t, "phase": int(t > 1)}
            for t in range(4) for l in range(2)]
    src = tmp_path / "log.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, _ = import_trace(src, "vllm-jsonl", tmp_path / "t.parquet")
    trace = load_trace(tmp_path / "t.parquet")
    assert trace.phase.tolist() == [0, 0, 1, 1] and trace.prefill_steps == 2


def test_buckets_and_batches_do_not_change_the_result(tmp_path, monkeypatch):
    """A log of interleaved sequences imported in small batches and buckets of few lines equals it
    imported whole, and nothing is left beside the output."""
    from moesim.tracegen import importers

    rng = np.random.default_rng(3)
    records = [r for p in range(7) for r in _records(tokens=3, layers=4, problem=p)]
    records = [records[i] for i in rng.permutation(len(records))]  # sequences and tokens interleaved
    records = [r for r in records if not (r["problem_id"] == 2 and r["token_idx"] == 1 and r["layer"] == 3)]
    src = _jsonl(tmp_path / "log.jsonl", records)
    (tmp_path / "out").mkdir()
    _, dropped_whole = import_trace(src, "vllm-jsonl", tmp_path / "out" / "whole.parquet")
    monkeypatch.setattr(importers, "LINES_PER_BUCKET", 9)
    _, dropped = import_trace(src, "vllm-jsonl", tmp_path / "out" / "small.parquet", batch_lines=5)
    whole, small = load_trace(tmp_path / "out" / "whole.parquet"), load_trace(tmp_path / "out" / "small.parquet")
    assert dropped == dropped_whole == 1 and small.meta == whole.meta
    for name in ("experts", "weights", "seq_ids", "seq_offsets", "steps", "phase"):
        np.testing.assert_array_equal(getattr(small, name), getattr(whole, name), err_msg=name)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["small.parquet", "whole.parquet"]
