"""SGLang's routed-experts output -> trace file.

A server started with `--enable-return-routed-experts` answers a request that sets
`return_routed_experts: true` with `meta_info.routed_experts`: the base64 of an int32 array
[positions, num_hidden_layers, top_k], positions 0 .. prompt_tokens + completion_tokens - 2
(the last generated token is never run). Save one response per line (JSONL); this reads them
one at a time. Rows below `prompt_tokens` are prefill, the rest decode.

SGLang sends ids only: no weights, and the order is whatever its top-k kernel wrote, taken
as rank order. Dense layers (DeepSeek's first layers) hold placeholders (-1, or zeros that
repeat one id k times) and are dropped; `expert_ids_schema.moe_layer_ids`, when the response
has it, names the MoE layers instead. The number of experts and the dims come from `--model`.

A response's other fields are ignored (its text, its other meta_info); one of the fields read in other letters or
spacing ('Prompt_tokens') is refused, as the other importers refuse theirs: it would be read as absent (every
position decoding).
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, first_line
from moesim.tracegen.models import ModelSpec
from moesim.tracegen.io import misspelt, write_trace
from moesim.tracegen.schema import DECODE, PREFILL, TraceMeta
from moesim.tracegen.trace import Trace, concat_traces


def import_sglang(src: Path, out: Path, spec: ModelSpec | None) -> Trace:
    """Convert a JSONL file of SGLang responses into a trace at `out`."""
    if spec is None:
        raise MoesimError(f"{src}: --format sglang needs --model (the payload holds expert ids only; "
                          "the number of experts, top-k and dims come from the preset)")
    meta = spec.trace_meta(source=f"sglang:{src.name}")
    parts, keys = [], []
    with open(src, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{src}:{number}"
            key, experts, prompt = _parse(line, where, meta)
            steps = np.arange(experts.shape[0], dtype=np.int32)
            part = Trace(meta=meta, experts=experts, seq_ids=np.array([len(parts)], np.int32),
                         seq_offsets=np.array([0, experts.shape[0]], np.int64), steps=steps,
                         phase=np.where(steps < prompt, PREFILL, DECODE).astype(np.int8))
            part.validate(where)
            parts.append(part)
            keys.append(key or f"{src.name}:{number}")
    if not parts:
        raise MoesimError(f"{src}: no records")
    trace = concat_traces(parts)
    trace.meta = meta.replace(sequence_keys=keys)
    write_trace(trace, out)
    return trace


def _parse(line: bytes, where: str, meta: TraceMeta) -> tuple[str | None, np.ndarray, int]:
    """(request id, experts [positions, L, k] int16, prompt length) of one response line."""
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise MoesimError(f"{where}: not JSON ({first_line(exc)})") from None
    if isinstance(rec, dict):
        _misspelt(rec, ("meta_info",), where)
    info = rec.get("meta_info", rec) if isinstance(rec, dict) else None
    if isinstance(info, dict):
        _misspelt(info, _FIELDS, where, "meta_info." if info is not rec else "")
    if not isinstance(info, dict) or info.get("routed_experts") is None:
        raise MoesimError(f"{where}: no meta_info.routed_experts (start SGLang with --enable-return-routed-experts "
                          "and send return_routed_experts: true)")
    flat = _decode(info["routed_experts"], where)
    if flat.size == 0:
        raise MoesimError(f"{where}: routed_experts holds no expert ids")
    prompt, completion = info.get("prompt_tokens"), info.get("completion_tokens")
    k, schema = meta.top_k, info.get("expert_ids_schema") or {}
    if not isinstance(schema, dict):
        raise MoesimError(f"{where}: expert_ids_schema must be an object")
    _misspelt(schema, _SCHEMA_FIELDS, where, "expert_ids_schema.")
    if schema.get("top_k", k) != k:
        raise MoesimError(f"{where}: top_k {schema['top_k']!r} in the response, the model preset has {k}")
    if prompt is not None or completion is not None:  # both, whole: else the prompt would be dropped unsaid
        if not (_whole(prompt) and _whole(completion) and prompt >= 0 and completion >= 1):
            raise MoesimError(f"{where}: prompt_tokens and completion_tokens must be whole numbers, >= 0 and >= 1, "
                              f"got {prompt!r} and {completion!r}")
        positions = prompt + completion - 1
        if positions < 1 or flat.size % (positions * k):
            raise MoesimError(f"{where}: {flat.size} expert ids do not fill {positions} positions x top-{k}")
        layers = flat.size // (positions * k)
    else:
        prompt, layers = 0, schema.get("num_layers", meta.num_layers)
        if not _whole(layers) or layers < 1:
            raise MoesimError(f"{where}: expert_ids_schema.num_layers must be a positive integer, got {layers!r}")
        if flat.size % (layers * k):
            raise MoesimError(f"{where}: {flat.size} expert ids do not fill {layers} layers x top-{k}")
    grid = flat.reshape(-1, layers, k)
    moe = schema.get("moe_layer_ids")
    if moe is not None and (not isinstance(moe, list) or not all(_whole(i) and 0 <= i < layers for i in moe)
                            or any(a >= b for a, b in zip(moe, moe[1:]))):
        raise MoesimError(f"{where}: moe_layer_ids must be a rising list of layer numbers 0..{layers - 1}")
    if moe is None:
        placeholder = (grid < 0).all(axis=2) | ((grid == grid[:, :, :1]).all(axis=2) if k > 1 else False)
        moe = np.flatnonzero(~placeholder.all(axis=0))
    if len(moe) != meta.num_layers:
        raise MoesimError(f"{where}: {len(moe)} of {layers} layers carry routing, the model preset has "
                          f"{meta.num_layers} MoE layers (wrong --model?)")
    experts = grid[:, moe]
    bad = np.argwhere((experts < 0) | (experts >= meta.num_experts))
    if bad.size:
        pos, layer, slot = bad[0]
        raise MoesimError(f"{where}: position {pos}, MoE layer {layer}: expert {experts[pos, layer, slot]} "
                          f"out of range 0..{meta.num_experts - 1}")
    key = info.get("id")
    return (None if key is None else str(key)), experts.astype(np.int16), prompt


_FIELDS = ("id", "routed_experts", "prompt_tokens", "completion_tokens", "expert_ids_schema")  # of meta_info
_SCHEMA_FIELDS = ("top_k", "num_layers", "moe_layer_ids")  # of expert_ids_schema


def _misspelt(record: dict, known: tuple[str, ...], where: str, within: str = "") -> None:
    """Refuse a key of ``record`` that is one of ``known`` in other letters or spacing (``moesim.tracegen.io.misspelt``)."""
    for key in misspelt(record, known.__contains__)[:1]:
        raise MoesimError(f"{where}: field {within + key!r} is read as {within + key.strip().lower()!r} only when "
                          "spelt so (others are ignored)")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _decode(payload, where: str) -> np.ndarray:
    """The int32 ids of a base64 string (SGLang's encoding) or of nested lists."""
    if isinstance(payload, str):
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise MoesimError(f"{where}: routed_experts is not base64") from None
        if len(raw) % 4:
            raise MoesimError(f"{where}: routed_experts holds {len(raw)} bytes, not whole int32 values")
        return np.frombuffer(raw, dtype="<i4")
    try:
        ids = np.asarray(payload)
    except (TypeError, ValueError, OverflowError):
        ids = None  # ragged lists
    if ids is None or (ids.dtype.kind not in "iu" and ids.size):
        # a float id (1.5, or 2.0) is not truncated to an expert: the payload is not SGLang's
        raise MoesimError(f"{where}: routed_experts is neither base64 nor a nested list of integers") from None
    return ids.astype(np.int64).ravel()
