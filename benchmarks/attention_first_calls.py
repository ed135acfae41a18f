"""What a first call of attention at a new number of keys costs, per kernel torch may choose: the decode step's
attention of the replay (one query row a sequence, the model's heads, K and V read in place from a longer pool)
at ``--calls`` key counts not seen before, then the same counts again, in ms a call; then the same with the
kernels the replay allows (``moesim.replay.compute.attention_kernels``).

A decoding step's context grows by one key a token, so a kernel that builds something per key count pays it on
every step of a first replay. On an H200 (torch 2.11, 2026-11-27) torch chose cuDNN's kernel, which took 35-70 ms
a new count against 0.05 ms a seen one (docs/replay.md, "Measured on a GPU, second session").

    python benchmarks/attention_first_calls.py                  # a GPU, OLMoE's heads (16 of 128), bf16
    python benchmarks/attention_first_calls.py --device cpu     # torch's CPU kernels, fp32
"""

from __future__ import annotations

import argparse
import contextlib
import time

from moesim.replay.compute import DTYPE, attention_kernels, heads
from moesim.tracegen.models import get_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--model", default="olmoe-1b-7b", help="a preset: its query and KV heads")
    ap.add_argument("--calls", type=int, default=40, help="key counts, each called once new and once seen")
    ap.add_argument("--keys", type=int, default=1000, help="the first key count (each kernel starts past the last)")
    args = ap.parse_args()
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = get_model(args.model)
    q_heads, kv_heads, hd = heads(model.q_dim or model.d_model, model.kv_dim or model.d_model)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[DTYPE[args.device]]
    kernels = [("torch's choice", contextlib.nullcontext), ("the replay's", lambda: attention_kernels(torch, args.device))]
    kernels += [(b.name.lower(), lambda b=b: sdpa_kernel([b])) for b in
                (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                 SDPBackend.MATH)]
    size = args.keys + args.calls * len(kernels)  # every kernel its own counts, past the last kernel's
    pool = [torch.randn(kv_heads, size, hd, device=args.device, dtype=dtype) for _ in range(2)]
    query = torch.randn(1, q_heads, 1, hd, device=args.device, dtype=dtype)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def call(keys: int):
        k, v = (p.as_strided((1, kv_heads, keys, hd), (keys * hd, size * hd, hd, 1)) for p in pool)
        return torch.nn.functional.scaled_dot_product_attention(query, k, v, enable_gqa=True)

    call(16)  # the first call of all (library set-up) outside every row
    sync()

    print(f"{args.model}: {q_heads} query heads over {kv_heads} KV heads of {hd}, {dtype}, {args.device}; "
          f"ms a call at {args.calls} key counts, after one call of each kernel at another count")
    choice = getattr(torch, "_fused_sdp_choice", None)  # torch's own (private) answer to which kernel it takes
    if choice is not None:
        k, v = (p.as_strided((1, kv_heads, args.keys, hd), (args.keys * hd, size * hd, hd, 1)) for p in pool)
        for name, context in kernels[:2]:
            with context():
                print(f"{name} takes {SDPBackend(choice(query, k, v, enable_gqa=True)).name.lower()}")
    print(f"{'kernels':22s} {'new':>9s} {'seen':>9s}")
    start = args.keys
    for i, (name, context) in enumerate(kernels):
        counts = range(start, start + args.calls)
        start += args.calls
        row = []
        try:
            with context():
                call(8 + i)  # the kernel's own first use (its set-up), at a count no row times
                sync()
                for _ in ("new", "seen"):
                    began = time.perf_counter()
                    for keys in counts:
                        call(keys)
                    sync()
                    row.append(f"{(time.perf_counter() - began) * 1e3 / args.calls:9.3f}")
        except RuntimeError as e:  # a kernel this device or these inputs do not have
            row = [f"not run: {str(e).splitlines()[0][:60]}"]
        print(f"{name:22s} {' '.join(row)}", flush=True)


if __name__ == "__main__":
    main()
