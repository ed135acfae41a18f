"""The trace file format: Parquet columns and the `moesim` metadata record (see DESIGN.md)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

from moesim import __version__
from moesim.errors import MoesimError, first_line

SCHEMA_VERSION = 1
METADATA_KEY = "moesim"

# One row per sequence x step x layer: each column's type, "list[...]" a list of values of that type
# (``moesim.tracegen.io`` reads and writes them; this module needs no Parquet library).
COLUMNS: dict[str, str] = {
    "seq": "int32",
    "step": "int32",
    "phase": "int8",
    "layer": "int16",
    "experts": "list[int16]",
    "weights": "list[float32]",
    "probs": "list[float32]",
    "spec": "list[int16]",
    "token": "int32",
}
REQUIRED = ("seq", "step", "phase", "layer", "experts")
NULLABLE = ("weights", "probs", "spec", "token")
FORMATS = ("vllm-jsonl", "sglang", "csv")  # the logs `moesim trace import` reads (``moesim.tracegen.importers``)

PREFILL, DECODE = 0, 1

# metadata fields: (name, type, lowest value) — ints and floats within range, strings, a list of strings
_FIELD_RULES = [("num_layers", int, 1), ("num_experts", int, 1), ("top_k", int, 1), ("model", str, 0),
                ("d_model", int, 1), ("d_expert", int, 1), ("bytes_per_param", float, 0), ("expert_bytes", int, 1),
                ("source", str, 0), ("dropped_tokens", int, 0), ("sequence_keys", list, 0),
                ("shared_experts", int, 0), ("d_shared", int, 1), ("routing", str, 0), ("schema_version", int, 1),
                ("tool_version", str, 0)]
_OPTIONAL = {"d_model", "d_expert", "bytes_per_param", "expert_bytes", "sequence_keys", "d_shared"}
# experts and layers are int16 in the arrays; sizes past these are corrupt, not models
_MAX_INT = {name: 2 ** 15 - 1 if name in ("num_layers", "num_experts", "top_k") else 2 ** 62
            for name, _, _ in _FIELD_RULES}
_DESCRIBE = {int: lambda n, low: f"an integer in {low}..{_MAX_INT[n]}", float: lambda n, low: f"a finite number > {low}",
             str: lambda n, low: "a string", list: lambda n, low: "a list of strings"}


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
        for name, kind, low in _FIELD_RULES:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            if kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= _MAX_INT[name]
            elif kind is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                    and value > low
            elif kind is list:
                ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            else:
                ok = isinstance(value, kind)
            if not ok:
                raise MoesimError(f"metadata: {name} must be {_DESCRIBE[kind](name, low)}, got {value!r}")
        if self.top_k > self.num_experts:
            raise MoesimError(f"metadata: top_k {self.top_k} exceeds num_experts {self.num_experts}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> "TraceMeta":
        try:
            raw = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise MoesimError(f"{where}: metadata '{METADATA_KEY}' is not JSON ({first_line(exc)})") from None
        if not isinstance(raw, dict):
            raise MoesimError(f"{where}: metadata '{METADATA_KEY}' must be a JSON object, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        missing = {"num_layers", "num_experts", "top_k"} - raw.keys()
        if missing:
            raise MoesimError(f"{where}: metadata '{METADATA_KEY}' lacks {', '.join(sorted(missing))}")
        version = raw.get("schema_version", SCHEMA_VERSION)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise MoesimError(f"{where}: metadata schema_version must be a positive integer, got {version!r}")
        if version > SCHEMA_VERSION:
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
