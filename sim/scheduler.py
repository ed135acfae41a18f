"""A served stream's requests and the continuous-batching scheduler that forms each step.

Requests: request i serves trace sequence i for the first S (the trace's S sequences, in order); each
further round of S takes the sequences in a seeded shuffle. A request's prompt is its sequence's
recorded prompt rows, else ``prompt`` tokens the trace did not record (routed as ``moesim.sim.requests``
routes a given prompt), else none; its output is its decode rows. Arrivals are a Poisson process
(exponential gaps of mean 1/rate, seeded), all at time 0 (``burst``), or a file's (``read_arrivals``:
one row per request, its ``arrival_s`` and optionally the trace sequence ``seq`` it serves).

The scheduler follows vLLM's (V1) continuous batching. Each step has a budget of ``max_batch_tokens``
tokens. The running requests come first, in the order they were admitted: one still prefilling is
given the rest of its prompt, or as much as the budget has left with chunked prefill (without it a
prompt runs whole, in one step); one decoding verifies ``draft_tokens`` + 1 positions (1 without
speculative decoding), or its last few. Then waiting requests that have arrived are admitted first come
first served while fewer than ``max_batch`` run and budget is left; without chunked prefill, a head
whose prompt does not fit the budget left waits, and those behind it with it. A step with nothing to
run waits for the next arrival.

A decode step's verification accepts each draft in turn with probability ``acceptance`` until one is
rejected; the request gains the accepted drafts and one more token (the target model's), so one to
d + 1 tokens. The routing of the positions verified is the trace's next rows: a rejected draft's own
routing is not recorded anywhere, and the positions a later step verifies again are the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from moesim.errors import MoesimError, first_line
from moesim.tracegen.io import READ_FAILURES, misspelt
from moesim.sim.requests import check_prompt
from moesim.tracegen.trace import Trace


@dataclass
class Queue:
    """Every request of the stream, by request id: its sequence, arrival, work and what happened to it."""

    seq: np.ndarray            # int64 [N]: the trace sequence it serves
    arrival: np.ndarray        # float64 [N]: seconds
    prompt: np.ndarray         # int64 [N]: prompt tokens (recorded or given; 0: none)
    recorded: np.ndarray       # bool [N]: its prompt is the trace's rows (else routed from the trace's choices)
    decode: np.ndarray         # int64 [N]: decode rows (output tokens after the first)
    first_row: np.ndarray      # int64 [N]: its sequence's first trace row
    prompt_done: np.ndarray    # int64 [N]
    decode_done: np.ndarray    # int64 [N]
    admitted: np.ndarray       # float64 [N]: start of its first step (nan: not yet)
    first_token: np.ndarray    # float64 [N]: end of the step that gave its first token
    decode_start: np.ndarray   # float64 [N]: when its decode steps began
    finish: np.ndarray         # float64 [N]

    @property
    def size(self) -> int:
        return int(self.seq.size)


def make_queue(trace: Trace, requests: int, prompt: int, arrivals: np.ndarray, rng: np.random.Generator,
               seq: np.ndarray | None = None, prompt_asked: bool = False) -> Queue:
    """The stream's ``requests`` requests over ``trace`` (module docstring) arriving at ``arrivals``, serving
    the sequences ``seq`` (default: in order, then seeded shuffles); ``prompt_asked``: ``check_prompt``'s."""
    n_seqs = trace.num_sequences
    if seq is None:
        order = [np.arange(n_seqs)] + [rng.permutation(n_seqs) for _ in range(1, -(-requests // n_seqs))]
        seq = np.concatenate(order)[:requests]
    seq = np.asarray(seq, np.int64)
    offsets = trace.seq_offsets.astype(np.int64)
    prompt_rows = check_prompt(trace, prompt, seq, prompt_asked)[seq]
    recorded = prompt_rows > 0
    nan = np.full(requests, np.nan)
    return Queue(seq, arrivals, np.where(recorded, prompt_rows, prompt).astype(np.int64), recorded,
                 (offsets[seq + 1] - offsets[seq] - prompt_rows).astype(np.int64), offsets[seq],
                 np.zeros(requests, np.int64), np.zeros(requests, np.int64), nan.copy(), nan.copy(), nan.copy(),
                 nan.copy())


# an arrivals file's columns, and what each holds
ARRIVAL_COLUMNS = {"arrival_s": "a number (seconds)", "seq": "an integer (a trace sequence)"}


def read_arrivals(path: str, n_seqs: int) -> tuple[np.ndarray, np.ndarray | None]:
    """A file's arrival times (CSV or Parquet, one row per request: ``arrival_s``, seconds ≥ 0, in any
    order) and the trace sequence each serves (its ``seq`` column, 0..n_seqs - 1; None without one). Other columns
    (a log's, the request rows ``sim serve --out`` writes) are not read; one of these names in other letters
    (``Seq``) is refused."""
    try:
        frame = pl.read_parquet(path, glob=False) if path.lower().endswith(".parquet") else \
            pl.read_csv(path, glob=False, infer_schema_length=None)
    except FileNotFoundError:
        raise MoesimError(f"{path}: no such arrivals file") from None
    except READ_FAILURES as exc:
        raise MoesimError(f"{path}: unreadable arrivals file ({first_line(exc)})") from None
    if "arrival_s" not in frame.columns:
        raise MoesimError(f"{path}: no arrival_s column (has {', '.join(frame.columns) or 'none'})")
    for name in misspelt(frame.columns, ARRIVAL_COLUMNS.__contains__)[:1]:  # 'Seq' was ignored: request i served seq i
        raise MoesimError(f"{path}: column {name!r} is read as {name.strip().lower()!r} only when spelt so (an "
                          f"arrivals file's columns: {' and '.join(ARRIVAL_COLUMNS)})")
    for name in ARRIVAL_COLUMNS:
        dtype = frame.schema.get(name)
        if dtype is not None and not (dtype.is_numeric() or dtype in (pl.String, pl.Null)):
            raise MoesimError(f"{path}: column '{name}' is {dtype}, an arrivals file's is {ARRIVAL_COLUMNS[name]}")
    if frame.height == 0:
        raise MoesimError(f"{path}: no requests")
    arrival = _numbers(path, frame["arrival_s"], "arrival_s", float)
    bad = np.flatnonzero(~np.isfinite(arrival) | (arrival < 0))
    if bad.size:
        raise MoesimError(f"{path}: row {bad[0] + 1}: arrival_s {arrival[bad[0]]} is not a time in seconds >= 0")
    if "seq" not in frame.columns:
        return arrival, None
    seq = _numbers(path, frame["seq"], "seq", int)
    bad = np.flatnonzero((seq < 0) | (seq >= n_seqs))
    if bad.size:
        raise MoesimError(f"{path}: row {bad[0] + 1}: seq {seq[bad[0]]} is not one of the trace's {n_seqs} sequences")
    return arrival, seq


def _numbers(path: str, column: pl.Series, name: str, kind) -> np.ndarray:
    """A column as float64 or int64 values; a missing value, text or a fraction where a whole number belongs is
    refused, naming its row."""
    values = column.cast(pl.Float64, strict=False)
    bad = np.flatnonzero(values.is_null().to_numpy())
    if bad.size:
        raise MoesimError(f"{path}: row {bad[0] + 1}: {name} {column[int(bad[0])]!r} is not a number")
    values = values.to_numpy()
    if kind is int:
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)))
        if bad.size:
            raise MoesimError(f"{path}: row {bad[0] + 1}: {name} {values[bad[0]]} is not a whole number")
        return values.astype(np.int64)
    return values


def arrival_times(kind: str, rate: float | None, n: int, rng: np.random.Generator) -> np.ndarray:
    """Seconds at which ``n`` requests arrive: a Poisson process of ``rate`` per second, or all at 0."""
    if kind == "burst":
        return np.zeros(n)
    return np.cumsum(rng.exponential(1.0 / rate, n))


def most_step_tokens(queue: Queue, max_batch: int, max_batch_tokens: int, draft_tokens: int) -> int:
    """The most tokens a step of ``queue`` can hold (``Scheduler.form``): at most ``max_batch`` requests, each with
    one piece, of at most its prompt (a prefill chunk) or ``draft_tokens`` + 1 of its decode positions; and at most
    ``max_batch_tokens`` in all. What a table by tokens per step or per expert is sized by: a budget of 2^31 tokens
    over a few short requests is a few entries, not 2^31 (at least 1)."""
    most = np.maximum(queue.prompt, np.minimum(draft_tokens + 1, queue.decode))
    if max_batch < most.size:  # the max_batch largest
        most = np.partition(most, most.size - max_batch)[most.size - max_batch:]
    return max(1, min(int(max_batch_tokens), int(most.sum())))


@dataclass
class Piece:
    """One request's part of a step: ``n`` tokens of its prompt (from ``start``) or ``n`` decode positions."""

    request: int
    prefill: bool
    start: int
    n: int


class Scheduler:
    """Forms steps over a ``Queue`` (module docstring) and records what each step gave its requests."""

    def __init__(self, queue: Queue, max_batch: int, max_batch_tokens: int, chunked_prefill: bool,
                 draft_tokens: int, acceptance: float, rng: np.random.Generator):
        self.q, self.max_batch, self.budget, self.chunked = queue, max_batch, max_batch_tokens, chunked_prefill
        self.draft, self.acceptance, self.rng = draft_tokens, acceptance, rng
        self.waiting = np.argsort(queue.arrival, kind="stable")  # first come first served
        self.next_waiting = 0
        self.running: list[int] = []
        self.finished = 0

    def done(self) -> bool:
        return self.finished == self.q.size

    def next_arrival(self) -> float:
        return float(self.q.arrival[self.waiting[self.next_waiting]])

    def form(self, now: float) -> list[Piece]:
        """The next step's pieces at time ``now`` (empty: nothing to run until the next arrival)."""
        q, left, pieces = self.q, self.budget, []
        for r in self.running:
            piece = self._piece(r, left)
            if piece is None:
                continue
            pieces.append(piece)
            left -= piece.n
        while (self.next_waiting < q.size and len(self.running) < self.max_batch and left > 0
               and q.arrival[self.waiting[self.next_waiting]] <= now):
            r = int(self.waiting[self.next_waiting])
            piece = self._piece(r, left)
            if piece is None:  # a whole prompt that does not fit waits, and those behind it
                break
            self.next_waiting += 1
            self.running.append(r)
            q.admitted[r] = now
            pieces.append(piece)
            left -= piece.n
        return pieces

    def _piece(self, r: int, left: int) -> Piece | None:
        q = self.q
        rest = q.prompt[r] - q.prompt_done[r]
        if rest > 0:
            n = min(rest, left) if self.chunked else (rest if rest <= left else 0)
            return Piece(r, True, int(q.prompt_done[r]), int(n)) if n > 0 else None
        n = min(self.draft + 1, q.decode[r] - q.decode_done[r], left)
        return Piece(r, False, int(q.decode_done[r]), int(n)) if n > 0 else None

    def finish_step(self, pieces: list[Piece], start: float, end: float) -> None:
        """Advance each piece's request by what the step ``start``..``end`` gave it."""
        q = self.q
        for p in pieces:
            r = p.request
            if p.prefill:
                q.prompt_done[r] += p.n
                if q.prompt_done[r] == q.prompt[r]:
                    q.first_token[r] = end  # the prefill's last token gives the first output token
                    q.decode_start[r] = end
            else:
                if np.isnan(q.decode_start[r]):
                    q.decode_start[r] = start
                q.decode_done[r] += self._accepted(p.n)
                if np.isnan(q.first_token[r]):
                    q.first_token[r] = end
            if q.prompt_done[r] == q.prompt[r] and q.decode_done[r] == q.decode[r]:
                q.finish[r] = end
                self.running.remove(r)
                self.finished += 1

    def _accepted(self, n: int) -> int:
        """Tokens a verification of ``n`` positions gives: the drafts accepted before the first rejection, and one."""
        if n == 1:
            return 1
        taken = self.rng.random(n - 1) < self.acceptance
        return 1 + int(np.argmin(taken)) if not taken.all() else n
