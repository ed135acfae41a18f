"""Synthetic routing traces with controlled locality.

Each layer l has a global expert popularity g_l ~ Dirichlet(layer_alpha), and each sequence s a
preference p_{s,l} ~ Dirichlet(seq_alpha * E * g_l): small alphas give the skew real routers show
(a few experts carry a large share of a sequence's tokens; MELINOE measures top-8 of 64 at about
31% in OLMoE). Slot j of token t at layer l then picks, in this order of chances:
  reuse        an expert of token t-1 at the same layer not yet picked (temporal locality),
  cross_layer  pi_l(expert in slot j at layer l-1), a fixed random map per layer (the structure
               that next-layer predictors learn),
  otherwise    a draw from p_{s,l};
a pick already in the token's set is replaced by a fresh draw from p_{s,l}. Slots are in rank
order. Everything follows from `seed`; the same arguments give the same trace.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields

import numba as nb
import numpy as np

from moesim.errors import MoesimError, named
from moesim.host import available_ram
from moesim.tracegen.model_spec import model_file_of, with_model_file
from moesim.tracegen.schema import DECODE, PREFILL, TraceMeta
from moesim.tracegen.trace import Trace


MAX_ALPHA = 1e6  # at this alpha a Dirichlet draw differs from its mean by about 0.1% (one standard deviation)


@dataclass(frozen=True)
class Locality:
    """The knobs of the generator; see the module docstring."""

    # Defaults give an OLMoE-shaped trace (E=64, k=8) MELINOE's top-8-of-64 share of about 31%.
    layer_alpha: float = 2.0
    seq_alpha: float = 1.5
    reuse: float = 0.25
    cross_layer: float = 0.3

    def __post_init__(self):
        for field in fields(self):  # a str, None or bool is no knob's value
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise MoesimError(f"{named(field.name)} must be a number, got {value!r}")
        for name in ("layer_alpha", "seq_alpha"):  # past MAX_ALPHA the draws are their means; infinite ones never end
            if not 0 < getattr(self, name) <= MAX_ALPHA:
                raise MoesimError(f"{named(name)} must be > 0 and at most {MAX_ALPHA:g}, got {getattr(self, name)}")
        for name in ("reuse", "cross_layer"):
            if not 0 <= getattr(self, name) <= 1:
                raise MoesimError(f"{named(name)} must be in [0, 1], got {getattr(self, name)}")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


# bytes a generated trace needs per expert access, measured: the int16 array, and writing it in chunks
# (100M accesses: 0.2 GB dense, 0.68 GB peak for `moesim trace synth`)
BYTES_PER_ACCESS = 8


def check_memory(accesses: int, advice: str = "generate fewer sequences or tokens") -> None:
    """Refuse, before allocating, a trace this machine's free memory cannot hold."""
    free = available_ram()
    if free is not None and accesses * BYTES_PER_ACCESS > free:  # None: nothing to tell; the allocation decides
        raise MoesimError(f"{accesses:,} expert accesses need about {accesses * BYTES_PER_ACCESS / 1e9:.1f} GB; "
                          f"{free / 1e9:.1f} GB of memory is free; {advice}")


def synth_trace(layers: int, experts: int, top_k: int, sequences: int, tokens: int, seed: int,
                locality: Locality = Locality(), prompt_tokens: int = 0, model: str = "synthetic",
                meta: TraceMeta | None = None) -> Trace:
    """A trace of `sequences` x (prompt_tokens prefill + tokens decode) steps."""
    for name, value in (("layers", layers), ("experts", experts), ("top_k", top_k), ("sequences", sequences),
                        ("tokens", tokens), ("seed", seed), ("prompt_tokens", prompt_tokens)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise MoesimError(f"{name} must be an integer, got {value!r}")
    layers, experts, top_k, sequences, tokens = int(layers), int(experts), int(top_k), int(sequences), int(tokens)
    for name, value in (("layers", layers), ("experts", experts), ("top_k", top_k), ("sequences", sequences),
                        ("tokens", tokens)):
        if value < 1:
            raise MoesimError(f"{named(name)} must be at least 1, got {value}")
    if prompt_tokens < 0:
        raise MoesimError(f"{named('prompt_tokens')} must be 0 or more, got {prompt_tokens}")
    if top_k > experts:
        raise MoesimError(f"top-k {top_k} exceeds the number of experts {experts}")
    if experts > 2 ** 15 - 1 or layers > 2 ** 15 - 1:
        raise MoesimError(f"at most {2 ** 15 - 1} experts and layers (expert ids are int16), got {experts} and {layers}")
    steps_per_seq = prompt_tokens + tokens
    check_memory(sequences * steps_per_seq * layers * top_k)
    out = np.empty((sequences * steps_per_seq, layers, top_k), dtype=np.int16)
    _generate(out, sequences, steps_per_seq, experts, locality.layer_alpha, locality.seq_alpha,
              locality.reuse, locality.cross_layer, np.uint32(seed % (1 << 32)))
    phase = np.tile(np.r_[np.full(prompt_tokens, PREFILL), np.full(tokens, DECODE)].astype(np.int8), sequences)
    knobs = ", ".join(f"{k}={v:g}" for k, v in locality.as_dict().items())
    meta = meta or TraceMeta(num_layers=layers, num_experts=experts, top_k=top_k, model=model)
    # the model file (config.json, GGUF) a model's metadata came from stays named: a run asks for that file
    meta = meta.replace(num_layers=layers, num_experts=experts, top_k=top_k, dropped_tokens=0, sequence_keys=None,
                        source=with_model_file(f"synth(seed={seed}, {knobs})", model_file_of(meta.source)))
    return Trace(
        meta=meta,
        experts=out,
        seq_ids=np.arange(sequences, dtype=np.int32),
        seq_offsets=np.arange(0, sequences * steps_per_seq + 1, steps_per_seq, dtype=np.int64),
        steps=np.tile(np.arange(steps_per_seq, dtype=np.int32), sequences),
        phase=phase,
    )


@nb.njit(cache=True)
def _dirichlet(alpha: np.ndarray, scale: float, out: np.ndarray) -> None:
    """A Dirichlet(``scale`` * ``alpha``) draw into ``out``."""
    total = 0.0
    for i in range(alpha.shape[0]):
        out[i] = np.random.gamma(scale * alpha[i], 1.0) + 1e-12  # tiny alphas underflow to 0
        total += out[i]
    for i in range(alpha.shape[0]):
        out[i] /= total


@nb.njit(cache=True)
def _pick_new(cdf: np.ndarray, chosen: np.ndarray, j: int) -> int:
    """A draw from cdf that is not among chosen[:j] (uniform over the rest if draws keep colliding)."""
    num_experts = cdf.shape[0]
    for _ in range(32):
        e = min(_first_above(cdf, np.random.random()), num_experts - 1)
        if not _member(chosen, j, e):
            return e
    every = np.empty(num_experts, np.int16)
    for e in range(num_experts):
        every[e] = e
    return _pick_unused(every, chosen, j)


@nb.njit(cache=True)
def _first_above(cdf: np.ndarray, u: float) -> int:
    """The first index whose value is above ``u`` (``np.searchsorted(cdf, u, side="right")``), by bisection."""
    lo, hi = 0, cdf.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if cdf[mid] <= u:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True)
def _pick_unused(candidates: np.ndarray, chosen: np.ndarray, j: int) -> int:
    """A uniform pick among candidates not yet in chosen[:j]."""
    free = 0
    for e in candidates:
        free += not _member(chosen, j, e)
    pick = np.random.randint(free)
    for e in candidates:
        if not _member(chosen, j, e):
            if pick == 0:
                return e
            pick -= 1
    return -1


@nb.njit(cache=True)
def _member(chosen: np.ndarray, j: int, e: int) -> bool:
    for i in range(j):
        if chosen[i] == e:
            return True
    return False


@nb.njit(cache=True)
def _permutation(out: np.ndarray) -> None:
    """``np.random.permutation(len(out))`` into ``out``: the same draws (a Fisher-Yates shuffle from the end)."""
    for i in range(out.shape[0]):
        out[i] = i
    for i in range(out.shape[0] - 1, 0, -1):
        j = np.random.randint(i + 1)
        out[i], out[j] = out[j], out[i]


@nb.njit(cache=True)
def _generate(out, sequences, steps, num_experts, layer_alpha, seq_alpha, reuse, cross, seed):
    np.random.seed(seed)
    layers, k = out.shape[1], out.shape[2]
    popularity = np.empty((layers, num_experts))
    maps = np.empty((layers, num_experts), dtype=np.int64)
    flat = np.ones(num_experts)
    for layer in range(layers):
        _dirichlet(flat, layer_alpha, popularity[layer])
        _permutation(maps[layer])
    cdf = np.empty((layers, num_experts))
    for s in range(sequences):
        for layer in range(layers):
            _dirichlet(popularity[layer], seq_alpha * num_experts, cdf[layer])
            for e in range(1, num_experts):
                cdf[layer, e] += cdf[layer, e - 1]
        for t in range(steps):
            row = s * steps + t
            for layer in range(layers):
                chosen = out[row, layer]
                for j in range(k):
                    u = np.random.random()
                    e = -1
                    if u < reuse:
                        if t > 0:
                            e = _pick_unused(out[row - 1, layer], chosen, j)
                    elif u < reuse + (1.0 - reuse) * cross:
                        if layer > 0:
                            e = maps[layer, out[row, layer - 1, j]]
                    if e < 0 or _member(chosen, j, e):
                        e = _pick_new(cdf[layer], chosen, j)
                    chosen[j] = e
