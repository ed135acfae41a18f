"""Published decode speeds of CPU-expert and hybrid systems, against what moesim predicts for them.

Each case is a measurement someone published with its hardware named: the model and its weight
format, the GPU, the host CPU and its memory, the engine's placement, and tokens/s at batch 1. moesim
simulates the same placement on the named machine with its presets (no fitting to these numbers) on a
synthetic trace of the model (the placements here put whole layers on the CPU, so which experts a
token picks does not change the time), after a warm-up sequence, and prints predicted against
measured tokens/s and GPU and host memory. docs/simulator.md discusses why each differs.

    python benchmarks/published_offload.py
"""

from __future__ import annotations

from moesim import simulate
from moesim.experiments.plan import plan_trace
from moesim.tracegen.models import get_model

# (source, model, format, machine, its CPU, settings, tokens/s measured, what the source says of memory)
CASES = [
    ("ik_llama.cpp PR 841 (llama-sweep-bench, TG at N_KV 0, main branch)", "gpt-oss-20b", "mxfp4", "rtx4080",
     "ryzen-7950x", {"strategy": "cpu-experts", "cpu_layers": 24}, 34.0, "--cpu-moe: experts in RAM"),
    ("llmfit PR 755 (llama.cpp server, Qwen3-30B-A3B-Instruct-2507 Q4_K_M)", "qwen3-30b-a3b", "q4_k", "rtx2080",
     "i9-10900x", {"strategy": "cpu-experts", "cpu_layers": 36}, 36.7, "-ngl 99 --n-cpu-moe 36 on 8 GB"),
    ("kTransformers V0.2, DeepSeek-V3 Q4_K_M, one socket (tutorial's table)", "deepseek-v3", "q4_k", "rtx4090",
     "xeon-6454s", {"strategy": "hybrid", "capacity": 0}, 8.73, "14 GB VRAM, 382 GB DRAM"),
]


def main() -> None:
    print(f"{'model':14} {'format':6} {'machine':24} {'placement':22} {'measured':>9} {'moesim':>7} {'error':>7} "
          f"{'VRAM GiB':>9} {'RAM GiB':>8}  source")
    for source, model, dtype, machine, cpu, settings, measured, memory in CASES:
        spec = get_model(model)
        trace, _ = plan_trace(spec, None, 2)
        r = simulate(trace, model=model, hardware=machine, cpu=cpu, dtype=dtype, other_dtype=dtype, warmup=1,
                     **settings)
        placement = (f"{settings['cpu_layers']}/{spec.num_layers} layers on CPU" if "cpu_layers" in settings
                     else "routed experts on CPU")
        print(f"{model:14} {dtype:6} {r.hardware:24} {placement:22} {measured:9.2f} {r.tokens_per_s:7.2f} "
              f"{100 * (r.tokens_per_s - measured) / measured:+6.0f}% {r.vram_gb:9.1f} {r.ram_gb:8.1f}  "
              f"{source}; {memory}")


if __name__ == "__main__":
    main()
