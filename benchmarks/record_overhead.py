"""What recording costs: `trace record` vs plain `generate()` on the same model, prompts and settings.

    python benchmarks/record_overhead.py [--model tiny-olmoe] [--prompts 16] [--new-tokens 64]
                                         [--batch-size 1] [--device cpu] [--repeat 3] [--speculate] [--probs]

Both sides decode greedily without stopping at EOS, after one warm-up run; each figure is the
best of --repeat runs. The recorded side includes the hooks, moving the routing to the host and
writing the Parquet file; model loading is outside both.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from moesim.tracegen.hf import load_model
from moesim.tracegen.record import RecordOptions, record_trace

WORDS = "the quick brown fox jumps over a lazy dog while experts route tokens through layers".split()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-olmoe")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--speculate", action="store_true")
    p.add_argument("--probs", action="store_true")
    args = p.parse_args()

    opts = RecordOptions(max_new_tokens=args.new_tokens, batch_size=args.batch_size, device=args.device,
                         dtype=args.dtype, speculate=args.speculate, probs=args.probs, ignore_eos=True)
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.txt"
        prompts.write_text("".join(" ".join(WORDS[i % 7:i % 7 + 4 + i % 9]) + "\n" for i in range(args.prompts)))
        texts = prompts.read_text().splitlines()
        model, tokenizer, _, _ = load_model(args.model, args.dtype, args.device)
        tokenizer.padding_side = "left"
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token

        def plain() -> float:
            start = time.perf_counter()
            for first in range(0, len(texts), args.batch_size):
                enc = tokenizer(texts[first:first + args.batch_size], return_tensors="pt", padding=True).to(model.device)
                model.generate(**enc, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                               pad_token_id=tokenizer.pad_token_id)
            _sync(args.device)
            return time.perf_counter() - start

        def recorded() -> float:
            summary = record_trace(args.model, prompts, Path(tmp) / "t.parquet", opts)
            _sync(args.device)
            return summary.seconds

        plain(), recorded()  # warm-up
        base = min(plain() for _ in range(args.repeat))
        rec = min(recorded() for _ in range(args.repeat))
    tokens = args.prompts * args.new_tokens
    print(f"model {args.model} on {args.device} ({torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}), "
          f"{args.prompts} prompts x {args.new_tokens} new tokens, batch {args.batch_size}, torch {torch.__version__}")
    print(f"{'':10}{'seconds':>10}{'tokens/s':>12}")
    print(f"{'generate':10}{base:10.3f}{tokens / base:12.1f}")
    print(f"{'record':10}{rec:10.3f}{tokens / rec:12.1f}")
    print(f"overhead  {rec / base:.2f}x")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
