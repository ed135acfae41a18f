"""The trace file format: Parquet columns and the `moesim` metadata record (see DESIGN.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

import polars as pl

from moesim import __version__
from moesim.errors import MoesimError

SCHEMA_VERSION = 1
METADATA_KEY = "moesim"

# One row per sequence x step x layer.
COLUMNS: dict[str, pl.DataType] = {
    "seq": pl.Int32(),
    "step": pl.Int32(),
    "phase": pl.Int8(),
    "layer": pl.Int16(),
    "experts": pl.List(pl.Int16()),
    "weights": pl.List(pl.Float32()),
    "probs": pl.List(pl.Float32()),
    "spec": pl.List(pl.Int16()),
    "token": pl.Int32(),
}
REQUIRED = ("seq", "step", "phase", "layer", "experts")
NULLABLE = ("weights", "probs", "spec", "token")

PREFILL, DECODE = 0, 1


@dataclass(frozen=True)
class TraceMeta:
    """What the `moesim` metadata key of a trace file holds."""

    num_layers: int
    num_experts: int
    top_k: int
    model: str = "unknown"
    d_model: int | None = None
    d_expert: int | None = None
    bytes_per_param: float | None = None
    expert_bytes: int | None = None
    source: str = ""
    dropped_tokens: int = 0
    sequence_keys: list[str] | None = None  # where each seq id came from (e.g. "gsm8k/0")
    shared_experts: int = 0  # always-active experts per MoE layer (not in `experts`)
    d_shared: int | None = None  # their intermediate size
    routing: str = ""  # what the router computes (softmax/sigmoid, renormalisation, ...)
    schema_version: int = SCHEMA_VERSION
    tool_version: str = field(default=__version__)

    def __post_init__(self):
        for name in ("num_layers", "num_experts", "top_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise MoesimError(f"metadata: {name} must be a positive integer, got {getattr(self, name)!r}")
        if self.top_k > self.num_experts:
            raise MoesimError(f"metadata: top_k {self.top_k} exceeds num_experts {self.num_experts}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> "TraceMeta":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MoesimError(f"{where}: metadata '{METADATA_KEY}' is not JSON ({exc.msg})") from None
        known = {f.name for f in fields(cls)}
        missing = {"num_layers", "num_experts", "top_k"} - raw.keys()
        if missing:
            raise MoesimError(f"{where}: metadata '{METADATA_KEY}' lacks {', '.join(sorted(missing))}")
        if raw.get("schema_version", SCHEMA_VERSION) > SCHEMA_VERSION:
            raise MoesimError(
                f"{where}: trace schema version {raw['schema_version']} is newer than this moesim "
                f"understands ({SCHEMA_VERSION}); upgrade moesim"
            )
        try:
            return cls(**{k: v for k, v in raw.items() if k in known})
        except MoesimError as exc:
            raise MoesimError(f"{where}: {exc}") from None

    def replace(self, **changes) -> "TraceMeta":
        return TraceMeta(**{**asdict(self), **changes})
