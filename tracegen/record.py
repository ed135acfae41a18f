"""`trace record`: run a transformers MoE model on prompts and record its routing, layer by layer.

A forward hook on every MoE router keeps what the router returned: the top-k experts and their
weights as the model computed them, optionally the full distribution (softmax of the router
logits, for every family) and the speculative signal `spec`.

`spec` follows Speculating Experts §3.3's baseline signal s_l: layer l+1's router applied to
layer l's router input (the normalised residual stream after attention). The paper's stronger
quasi-hidden state q_l = LN_{l+1}(d_l + r_l) needs per-expert default vectors d_{l,e} averaged
offline over a corpus; it is not recorded here. The last MoE layer has no `spec`.

Rows follow the DESIGN.md semantics: prefill rows are the prompt's positions (phase 0), decode
rows are the generated tokens the model ran on (phase 1): with N new tokens that is N-1 rows,
since the last token is sampled but never fed back. A sequence ends at its EOS token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, named
from moesim.files import check_output
from moesim.tracegen.families import Family, is_router
from moesim.tracegen.hf import load_model, require_torch
from moesim.tracegen.io import TraceWriter
from moesim.tracegen.schema import DECODE, PREFILL, TraceMeta
from moesim.tracegen.trace import Trace, concat_traces

FLUSH_ROWS = 1 << 14  # (sequence, step) rows held in memory before a chunk goes to disk


@dataclass(frozen=True)
class RecordOptions:
    max_new_tokens: int = 64
    batch_size: int = 1
    device: str = "cpu"
    dtype: str = "auto"
    probs: bool = False
    speculate: bool = False
    chat: bool = False
    temperature: float = 0.0  # 0: greedy
    top_p: float | None = None  # None: 1, no cutoff
    seed: int | None = None  # None: 0
    ignore_eos: bool = False

    def __post_init__(self):
        if not 0 <= self.temperature < float("inf"):  # NaN too
            raise MoesimError(f"{named('temperature')} must be a finite number >= 0 (0: greedy), "
                              f"got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise MoesimError(f"{named('top_p')} must be a fraction in (0, 1], got {self.top_p}")
        unread = [named(n) for n in ("top_p", "seed") if getattr(self, n) is not None]
        if unread and self.temperature == 0:  # greedy decoding samples nothing
            raise MoesimError(f"{', '.join(unread)}: decoding is greedy at {named('temperature', 0)} (the default), "
                              f"so nothing reads {'it' if len(unread) == 1 else 'them'}")


@dataclass(frozen=True)
class RecordSummary:
    meta: TraceMeta
    sequences: int
    prefill_rows: int
    decode_rows: int
    seconds: float


def read_prompts(path: str | Path) -> list[tuple[str, str]]:
    """(key, prompt) pairs: a text file, one prompt per line, or JSONL with a `prompt` field."""
    path = Path(path)
    if not path.is_file():
        raise MoesimError(f"{path}: no such prompts file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise MoesimError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    jsonl = path.suffix in (".jsonl", ".json")
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append((f"{path.name}:{number}", line))
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MoesimError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str) or not rec["prompt"]:
            raise MoesimError(f"{path}:{number}: needs a non-empty string field 'prompt'")
        prompts.append((str(rec.get("id", f"{path.name}:{number}")), rec["prompt"]))
    if not prompts:
        raise MoesimError(f"{path}: no prompts (one per line, or JSONL with a 'prompt' field)")
    return prompts


def record_trace(model_ref: str, prompts_path: str | Path, out: str | Path, opts: RecordOptions = RecordOptions(),
                 progress: Callable[[int, int], None] | None = None) -> RecordSummary:
    """Record the routing of `model_ref` (folder or tiny preset) on the prompts into a trace file.

    `progress(sequences_done, sequences_total)` is called after every batch.
    """
    check_output(out, "trace", inputs=(prompts_path,), suffixes=(".parquet",))
    prompts = read_prompts(prompts_path)
    if opts.max_new_tokens < 1 or opts.batch_size < 1:
        raise MoesimError("--max-new-tokens and --batch-size must be at least 1")
    torch, _ = require_torch()
    model, tokenizer, family, name = load_model(model_ref, opts.dtype, opts.device)
    router_names = [n for n, m in model.named_modules() if is_router(m)]
    if not router_names:
        raise MoesimError(f"{model_ref}: no MoE router modules found in this {family.model_type} model")
    meta = model_meta(model, family, router_names, name, Path(prompts_path).name, [k for k, _ in prompts])
    tap = RouterTap([model.get_submodule(n) for n in router_names], family, opts.probs, opts.speculate)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(opts.seed or 0)
    start, rows = time.perf_counter(), [0, 0]
    pending: list[Trace] = []
    try:
        with TraceWriter(out, meta) as writer:
            for first in range(0, len(prompts), opts.batch_size):
                texts = [p for _, p in prompts[first:first + opts.batch_size]]
                chunk = _generate(model, tokenizer, tap, texts, first, opts, meta, torch)
                rows[0] += chunk.prefill_steps
                rows[1] += chunk.decode_steps
                pending.append(chunk)
                if sum(t.num_rows for t in pending) >= FLUSH_ROWS:
                    writer.add(concat_traces(pending))
                    pending = []
                if progress:
                    progress(first + len(texts), len(prompts))
            if pending:
                writer.add(concat_traces(pending))
            writer.close()
    finally:
        tap.remove()
    return RecordSummary(meta, len(prompts), rows[0], rows[1], time.perf_counter() - start)


def _generate(model, tokenizer, tap: RouterTap, texts: list[str], first: int, opts: RecordOptions,
              meta: TraceMeta, torch) -> Trace:
    """Generate for one batch of prompts and turn the router calls into trace rows.

    Call 0 (prefill) holds B x T rows, batch-major, T the left-padded prompt length; decode
    call i holds B rows and processes each sequence's (i-1)-th generated token. Rows of padding
    and of tokens after a sequence's EOS are dropped.
    """
    if opts.chat:
        if not tokenizer.chat_template:
            raise MoesimError("--chat: this model's tokenizer has no chat template")
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                               add_generation_prompt=True) for t in texts]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not opts.chat).to(model.device)
    empty = np.flatnonzero(enc.attention_mask.sum(dim=1).cpu().numpy() == 0)
    if empty.size:  # a folder without tokenizer files loads a tokenizer that encodes everything to nothing
        raise MoesimError(f"prompt {first + int(empty[0]) + 1}: the model's tokenizer encodes it to no token (does "
                          "its folder hold the tokenizer's files?)")
    kwargs = {"max_new_tokens": opts.max_new_tokens, "do_sample": opts.temperature > 0,
              "pad_token_id": tokenizer.pad_token_id}
    if opts.temperature > 0:
        kwargs.update(temperature=opts.temperature, top_p=opts.top_p or 1.0, top_k=None)
    if opts.ignore_eos:
        kwargs["min_new_tokens"] = opts.max_new_tokens
    out = model.generate(**enc, **kwargs)
    experts, weights, probs, spec = tap.take(torch)
    ids, mask = enc.input_ids.cpu().numpy(), enc.attention_mask.cpu().numpy().astype(bool)
    batch, width = ids.shape
    generated = out[:, width:].cpu().numpy()
    eos = model.generation_config.eos_token_id
    ended = np.isin(generated, [] if eos is None or opts.ignore_eos else np.atleast_1d(eos))
    produced = np.where(ended.any(axis=1), ended.argmax(axis=1) + 1, generated.shape[1])
    decode_calls = (experts.shape[0] - batch * width) // batch
    if produced.max() - 1 > decode_calls:
        raise MoesimError(f"internal: {decode_calls} decode calls for {produced.max()} generated tokens")

    index, steps, phase, tokens, offsets = [], [], [], [], [0]
    for b in range(batch):
        prompt = np.flatnonzero(mask[b])
        fed = np.arange(produced[b] - 1)  # generated tokens the model ran on
        index += [b * width + prompt, batch * width + fed * batch + b]
        steps += [np.arange(prompt.size), prompt.size + fed]
        phase += [np.full(prompt.size, PREFILL), np.full(fed.size, DECODE)]
        tokens += [ids[b, prompt], generated[b, fed]]
        offsets.append(offsets[-1] + prompt.size + fed.size)
    rows = np.concatenate(index)
    pick = (lambda a: None if a is None else a[rows])
    return Trace(meta=meta, experts=experts[rows].astype(np.int16), seq_ids=np.arange(first, first + batch, dtype=np.int32),
                 seq_offsets=np.asarray(offsets, np.int64), steps=np.concatenate(steps).astype(np.int32),
                 phase=np.concatenate(phase).astype(np.int8), weights=pick(weights), probs=pick(probs),
                 spec=None if spec is None else spec[rows].astype(np.int16),
                 tokens=np.concatenate(tokens).astype(np.int32))


def model_meta(model, family: Family, router_names: list[str], name: str, prompts: str, keys: list[str]) -> TraceMeta:
    """Trace metadata from the model's own config and parameters (bytes as loaded)."""
    config = model.config
    num_experts = int(getattr(config, family.experts_key))
    experts = model.get_submodule(router_names[0].rsplit(".", 1)[0]).experts
    params = list(experts.parameters())
    per_param = params[0].element_size()
    shared, d_shared = family.shared_experts(config)
    return TraceMeta(
        num_layers=len(router_names), num_experts=num_experts, top_k=int(config.num_experts_per_tok),
        model=name, d_model=int(config.hidden_size), d_expert=int(getattr(config, family.d_expert_key)),
        bytes_per_param=float(per_param), expert_bytes=sum(p.numel() for p in params) * per_param // num_experts,
        source=f"hf-record:{family.model_type}:{prompts}", sequence_keys=keys,
        shared_experts=shared, d_shared=d_shared, routing=family.routing)


class RouterTap:
    """Forward hooks on the routers; each call's outputs stay on the device until `take()`."""

    def __init__(self, routers: list, family: Family, probs: bool, speculate: bool):
        self.routers, self.family, self.probs, self.speculate = routers, family, probs, speculate
        self.calls: list[list[tuple]] = [[] for _ in routers]
        self.handles = [r.register_forward_hook(self._hook(i)) for i, r in enumerate(routers)]

    def _ranked(self, weights, experts):
        """Rank order, highest weight first, for routers whose top-k comes back unordered."""
        if not self.family.unsorted_topk:
            return weights, experts
        weights, order = weights.sort(dim=-1, descending=True, stable=True)
        return weights, experts.gather(-1, order)

    def _hook(self, layer: int):
        def hook(module, args, output):
            logits, weights, experts = output
            k = experts.shape[-1]
            weights, experts = self._ranked(weights.reshape(-1, k), experts.reshape(-1, k))
            spec = None
            if self.speculate and layer + 1 < len(self.routers):
                _, w_next, e_next = self.routers[layer + 1].forward(args[0])  # .forward: no hooks
                spec = self._ranked(w_next.reshape(-1, k), e_next.reshape(-1, k))[1].to(experts.dtype)
            probs = logits.reshape(experts.shape[0], -1).float().softmax(-1) if self.probs else None
            self.calls[layer].append((experts, weights.float(), probs, spec))
        return hook

    def take(self, torch) -> tuple[np.ndarray | None, ...]:
        """(experts, weights, probs, spec) of the calls since the last take, each [rows, L, width] or None."""
        columns = []
        for col in range(4):
            if all(calls[0][col] is None for calls in self.calls):
                columns.append(None)
                continue
            per_layer = []
            for calls in self.calls:
                if calls[0][col] is None:  # the last layer's spec: no next router
                    per_layer.append(np.full((sum(c[0].shape[0] for c in calls), calls[0][0].shape[1]), -1, np.int16))
                else:
                    per_layer.append(torch.cat([c[col] for c in calls]).cpu().numpy())
            columns.append(np.stack(per_layer, axis=1))
        self.calls = [[] for _ in self.routers]
        return tuple(columns)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
