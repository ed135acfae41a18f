"""What the discrete-event engine serves: a trace turned into request rows under batching.

Sequences are taken B at a time (static batching, in trace order) and decode in lockstep. A group
contributes, if it has prompt rows, one prefill row: per layer the union of the experts all its
prompt tokens chose (DESIGN.md: the prompt's union is loaded before decoding). Then one decode row
per lockstep step: per layer the union of the experts its active sequences chose, each expert
once, in the order sequence 0's ranks, then sequence 1's new ones, and so on. Rows are padded with
-1 to a common width W (B·k, or E when there are prefill rows). A union member's router weight is
the sum of the weights its tokens gave it, and its token count the number of tokens that chose it
(what its expert kernel computes). With B = 1 and no prefill rows the request rows are the trace's
rows, so the engine's hits equal the hit-rate engine's.

A trace that recorded no prompt for a group can be given one (``prompt`` tokens per sequence, for a
time to first token): a prefill row whose union per layer is every expert the trace routes to there,
each on its share of the row's P·B·k expert slots in proportion to how often the trace chose it
(largest remainders, ties to the lower id; ``prompt_routing``); its tokens then sit in the KV cache of
every decode row after it. A prefill row's output head runs on one token per sequence, its last, as engines
do (llama.cpp outputs the last token of a prompt batch, vLLM samples from each prompt's last): ``outputs``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from moesim.errors import MoesimError, named
from moesim.tracegen.schema import DECODE, PREFILL
from moesim.tracegen.stats import layer_counts
from moesim.tracegen.trace import Trace


@dataclass(frozen=True)
class Requests:
    experts: np.ndarray       # int16 [R, L, W], -1 padding
    weights: np.ndarray       # float32 [R, L, W], summed router weight of each member (0 where unknown)
    counts: np.ndarray        # int32 [R, L, W]: tokens of the row that chose each member (where experts >= 0)
    kind: np.ndarray          # int8 [R]: PREFILL or DECODE
    tokens: np.ndarray        # float64 [R]: tokens in the row
    outputs: np.ndarray       # float64 [R]: tokens whose logits the row computes (a prompt's last one per sequence)
    ctx: np.ndarray           # float64 [R]: KV-cache tokens their attention reads, summed
    group_offsets: np.ndarray  # int64 [G + 1]: rows of group g
    src_ptr: np.ndarray       # int64 [R + 1]: trace rows behind request row r are
    src_rows: np.ndarray      # int64: src_rows[src_ptr[r]:src_ptr[r + 1]]
    batch: int
    identity: bool = False    # the request rows are the trace's rows (batch 1, no prompt rows)

    @property
    def num_rows(self) -> int:
        return int(self.kind.shape[0])

    def union(self, per_trace_row: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-trace-row expert sets (int16 [N, L, j], -1 padded) gathered like the requests, and each
        member's token count."""
        if self.identity and per_trace_row.shape == self.counts.shape:
            # every member computes one token: the rows' own counts, shared (neither array is written)
            return np.ascontiguousarray(per_trace_row, np.int16), self.counts
        out = np.full((self.num_rows, per_trace_row.shape[1], width), -1, np.int16)
        counts = np.zeros(out.shape, np.int32)
        gather(per_trace_row, np.zeros(per_trace_row.shape, np.float32), self.src_ptr, self.src_rows,
               out, np.zeros(out.shape, np.float32), counts)
        return out, counts


def prompt_rows(trace: Trace) -> np.ndarray:
    """The prompt tokens each sequence of ``trace`` records (its prefill rows; 0 where it records none)."""
    return np.bincount(trace.row_sequence()[trace.phase == PREFILL], minlength=trace.num_sequences)


def check_prompt(trace: Trace, prompt: int, served: np.ndarray | None = None, asked: bool = False) -> np.ndarray:
    """``prompt_rows(trace)``; a ``prompt`` asked for (one above 0, or any ``asked``) where every sequence served
    (``served``: the sequences a stream serves, default all) records its own (it would change nothing: it is given
    to the sequences recorded without one, and a prompt of 0 would not keep a recorded one from being prefilled)
    is refused."""
    recorded = prompt_rows(trace)
    those = recorded if served is None else recorded[served]
    if (prompt > 0 or asked) and those.min() > 0:
        raise MoesimError(f"{named('prompt', prompt)}: every sequence {'of the trace' if served is None else 'served'} "
                          f"records its own prompt ({int(np.median(those))} tokens, the median), which is what is "
                          "prefilled; a prompt is given only to sequences recorded without one, so leave it out")
    return recorded


def build_requests(trace: Trace, batch: int = 1, context: int = 0, prompt: int = 0) -> Requests:
    """Request rows for ``trace`` decoded ``batch`` sequences at a time; ``context`` KV tokens are
    added to every sequence (a prompt the trace did not record, not computed), and a sequence without
    prompt rows is given a prefill of ``prompt`` tokens (module docstring)."""
    phase, steps = trace.phase, trace.steps.astype(np.int64)
    offsets = trace.seq_offsets.astype(np.int64)
    seq = trace.row_sequence()
    n_prompt = check_prompt(trace, prompt)
    # a decode row's index among its sequence's decode rows (prompt rows come first)
    d_index = np.arange(trace.num_rows) - offsets[seq] - n_prompt[seq]
    src, sizes, kind, group_offsets, given, prompts = [], [], [], [0], [], []
    for g in range(0, trace.num_sequences, batch):
        rows = np.arange(offsets[g], offsets[min(g + batch, trace.num_sequences)])
        added = 0
        recorded = rows[phase[rows] == PREFILL]
        if recorded.size:
            prompts.append((sum(map(len, kind)), np.unique(seq[recorded]).size))
            src.append(recorded)
            sizes.append(np.array([recorded.size]))
            kind.append(np.array([PREFILL], np.int8))
            added += 1
        elif prompt > 0:  # a prompt the trace did not record: a row with no trace rows behind it
            given.append((sum(map(len, kind)), min(g + batch, trace.num_sequences) - g))
            src.append(np.zeros(0, np.int64))
            sizes.append(np.array([0]))
            kind.append(np.array([PREFILL], np.int8))
            added += 1
        decode = rows[phase[rows] == DECODE]
        if decode.size:
            d = d_index[decode]
            src.append(decode[np.lexsort((seq[decode], d))])  # step-major, sequences in order
            per_step = np.bincount(d)
            sizes.append(per_step)
            kind.append(np.full(per_step.size, DECODE, np.int8))
            added += per_step.size
        group_offsets.append(group_offsets[-1] + added)
    src_ptr = np.concatenate([[0]] + [np.cumsum(np.concatenate(sizes))] if sizes else [[0]]).astype(np.int64)
    kind = np.concatenate(kind) if kind else np.zeros(0, np.int8)
    src_rows = np.concatenate(src).astype(np.int64) if src else np.zeros(0, np.int64)
    k, n_layers = trace.meta.top_k, trace.meta.num_layers
    width = max(batch * k, trace.meta.num_experts if (kind == PREFILL).any() else 0)
    identity = width == k and kind.size == trace.num_rows and np.array_equal(src_rows, np.arange(trace.num_rows))
    if identity:
        # one sequence at a time, no prompt rows: the request rows are the trace's rows
        experts = np.ascontiguousarray(trace.experts, np.int16)
        weights = (np.zeros(experts.shape, np.float32) if trace.weights is None
                   else np.nan_to_num(trace.weights).astype(np.float32, copy=False))
        # a materialised array, not a broadcast view: the compiled loop then sees one array type whatever
        # the workload, and is compiled once
        counts = np.ones(experts.shape, np.int32)
    else:
        experts = np.full((kind.size, n_layers, width), -1, np.int16)
        weights = np.zeros(experts.shape, np.float32)
        counts = np.zeros(experts.shape, np.int32)
        src_w = np.zeros(trace.experts.shape, np.float32) if trace.weights is None else np.nan_to_num(trace.weights)
        gather(trace.experts, src_w, src_ptr, src_rows, experts, weights, counts)
    tokens = np.diff(src_ptr).astype(np.float64)
    # KV tokens each row's attention reads: its tokens' positions, the context, a given prompt
    position = steps + 1 + context + np.where(n_prompt[seq] == 0, prompt, 0)
    ctx = np.zeros(kind.size)
    nonempty = np.diff(src_ptr) > 0
    if src_rows.size:
        ctx[nonempty] = np.add.reduceat(position[src_rows], src_ptr[:-1][nonempty])
    chosen = expert_choices(trace) if given else None
    for r, n_seqs in given:
        experts[r], counts[r] = prompt_routing(chosen, k, prompt * n_seqs, width)
        tokens[r] = prompt * n_seqs
        ctx[r] = n_seqs * (prompt * (prompt + 1) / 2 + prompt * context)
    outputs = tokens.copy()
    for r, n_seqs in prompts + given:  # a prompt's logits: its last token's only
        outputs[r] = n_seqs
    return Requests(experts, weights, counts, kind, tokens, outputs, ctx, np.array(group_offsets, np.int64), src_ptr,
                    src_rows, batch, identity)


def expert_choices(trace: Trace) -> np.ndarray:
    """float64 [L, E]: how often the trace chose each expert in each layer."""
    return layer_counts(trace.experts, trace.meta.num_experts).astype(np.float64)


def prompt_routing(chosen: np.ndarray, top_k: int, tokens: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The experts (int16 [L, width], most chosen first) and their token counts for a prompt of ``tokens``
    tokens the trace did not record: each layer's tokens·k expert slots shared out in proportion to how
    often the trace chose each expert there (``chosen``, from ``expert_choices``), by largest remainders
    (ties to the lower id)."""
    n_layers = chosen.shape[0]
    share = chosen / np.maximum(chosen.sum(axis=1, keepdims=True), 1) * tokens * top_k
    counts = np.floor(share).astype(np.int64)
    for layer_i in range(n_layers):  # largest remainders; stable sort keeps the lower id first on ties
        short = tokens * top_k - counts[layer_i].sum()
        order = np.argsort(-(share[layer_i] - counts[layer_i]), kind="stable")
        counts[layer_i, order[:short]] += 1
    counts = np.minimum(counts, tokens)  # a token chooses an expert once
    order = np.argsort(-counts, axis=1, kind="stable")[:, :width]
    top = np.take_along_axis(counts, order, axis=1)
    return (np.where(top > 0, order, -1).astype(np.int16), np.where(top > 0, top, 0).astype(np.int32))


@njit(cache=True)
def gather(src, src_w, ptr, rows, out, out_w, out_n):
    """out[r, l] = the distinct experts of src[rows[ptr[r]:ptr[r+1]], l] in first-seen order; out_w
    sums their weights, out_n counts the rows that chose each. Entries beyond out's width are
    dropped (never happens for requests). Each expert's place in the cell is looked up in a table by
    id (emptied after the cell), not searched for: a prompt row gathers thousands of tokens. The table
    is as long as the largest id among the rows gathered (a served step gathers a few rows of a long
    trace)."""
    n_layers, k = src.shape[1], src.shape[2]
    largest = -1
    for i in range(ptr[0], ptr[-1]):
        for layer in range(n_layers):
            for j in range(k):
                largest = max(largest, np.int64(src[rows[i], layer, j]))
    place = np.full(largest + 1, -1, np.int64)
    for r in range(out.shape[0]):
        for layer in range(n_layers):
            n = 0
            for i in range(ptr[r], ptr[r + 1]):
                for j in range(k):
                    e = src[rows[i], layer, j]
                    if e < 0:
                        continue
                    found = place[e]
                    if found < 0 and n < out.shape[2]:
                        found = n
                        place[e] = n
                        out[r, layer, n] = e
                        n += 1
                    if found >= 0:
                        out_w[r, layer, found] += src_w[rows[i], layer, j]
                        out_n[r, layer, found] += 1
            for m in range(n):
                place[out[r, layer, m]] = -1


@njit(cache=True)
def merge(out, out_n, experts, counts):
    """Add ``experts`` (int16 [L, j], -1 none) computing ``counts`` tokens each to the union ``out`` (int16
    [L, W], -1 padded) and its token counts ``out_n``: a member already there gains the tokens, a new one
    takes the next free place."""
    for layer in range(out.shape[0]):
        for i in range(experts.shape[1]):
            e = experts[layer, i]
            if e < 0:
                continue
            for m in range(out.shape[1]):
                if out[layer, m] == e or out[layer, m] < 0:
                    out[layer, m] = e
                    out_n[layer, m] += counts[layer, i]
                    break
