"""Hardware presets: machines as the papers and the published measurements ran them, part by part.

Nominal figures are the vendors'; PCIe 3/4/5 x16 are 16/32/64 GB/s as the papers quote them
(MELINOE Tab. 9, CommitMoE Tab. 1), the SSD is FlashMoE Tab. 2's PCIe 5 drive (7.4 GB/s), a CPU's
DRAM bandwidth per socket is channels x MT/s x 8 B. The efficiencies are typical measured fractions
(pinned host-to-device copies reach ~80–85% of a PCIe link; memory-bound decode kernels ~80% of HBM;
the CPU's in ``moesim.sim.cpu_rates``), not fitted to any point they are checked on.
"""

from __future__ import annotations

from dataclasses import replace

from moesim.sim.machine import CPU, GPU, SSD, Link

GPUS = {g.name.lower().replace(" ", ""): g for g in [
    GPU("H100", 3350, 989, 80),                   # SXM5, HBM3
    GPU("A100-40G", 1555, 312, 40),
    GPU("A6000", 768, 154.8, 48),                 # RTX A6000, GDDR6
    GPU("RTX4090", 1008, 165.2, 24),
    GPU("RTX4090D", 1008, 147.0, 24),             # China-market 4090: 14592 CUDA cores
    GPU("RTX4080", 716.8, 97.5, 16),
    GPU("RTX2080", 448, 40.3, 8),
    GPU("RTX2080Ti", 616, 53.8, 11),              # fp16 tensor cores with fp32 accumulate (no bf16)
    GPU("RTX5070Ti", 896, 87.9, 16),              # GDDR7; 70 SM x 512 FLOP/clk x 2.452 GHz (as the cards below)
    # the cards MoE offloading runs on at home (docs/hardware.md, "GPU presets", gives each figure's source): dense
    # fp16/bf16 tensor with fp32 accumulate, which a GeForce card runs at half its fp16-accumulate rate
    GPU("RTX3060", 360, 25.5, 12),                # 12 GB: 192-bit at 15 Gbps; 28 SM x 512 FLOP/clk x 1.777 GHz
    GPU("RTX3090", 936, 71.0, 24),                # 384-bit at 19.5 Gbps; 71 TFLOPS (GA102 whitepaper)
    GPU("RTX4060Ti", 288, 44.1, 16),              # the 16 GB card (the 8 GB one: --vram 8); 34 SM x 512 x 2.535 GHz
    GPU("RTX5090", 1792, 209.5, 32),              # GDDR7, 512-bit at 28 Gbps; 209.5 TFLOPS (RTX Blackwell whitepaper)
    GPU("GH200", 4000, 989, 96),                  # H100 with HBM3 96 GB
    # GPUs that share the host's memory (docs/hardware.md, "Unified memory", gives each figure's source): the memory's
    # bandwidth; hbm_gb the share of it the GPU may map by default
    GPU("GB10", 273, 62.5, 128, unified=True),    # DGX Spark: 128 GB LPDDR5X; 1 PFLOP FP4 sparse / 16 (RTX Blackwell's
                                                  # ratio of FP4 sparse to dense fp16 with fp32 accumulate)
    GPU("Radeon8060S", 256, 59.4, 96, unified=True, vendor="amd"),  # Ryzen AI Max+ 395: 256-bit LPDDR5X-8000; 40 CU
                                                                    # x 512 x 2.9 GHz; 96 GB: AMD's most Variable
                                                                    # Graphics Memory of 128
    GPU("M2Ultra", 800, 27.2, 144, unified=True, vendor="apple"),  # 76-core GPU: 21.47 TFLOPS at 60 cores x 76/60;
                                                                   # 3/4 of 192 GB, macOS's default GPU share above
                                                                   # 36 GB
    GPU("M3Ultra", 819, 28.4, 464, unified=True, vendor="apple"),  # 80-core GPU, 512 GB: 464 GiB its default share
    GPU("M4Max", 546, 18.4, 107.5, unified=True, vendor="apple"),  # 40-core GPU, 128 GB: 107.5 GiB its default share
    # discrete AMD and Intel cards (docs/hardware.md, "GPU presets"): dense fp16 matrix rate
    GPU("RX7900XTX", 960, 122.8, 24, vendor="amd"),     # 384-bit at 20 Gbps; 96 CU x 512 FLOP/clk x 2.5 GHz
    GPU("ArcB580", 456, 109.4, 12, vendor="intel"),     # 192-bit at 19 Gbps; 160 XMX x 256 FLOP/clk x 2.67 GHz
    GPU("ArcProB70", 608, 183.5, 32, vendor="intel"),   # 256-bit at 19 Gbps; 367 INT8 TOPS / 2
]}
LINKS = {lk.name: lk for lk in [
    Link("pcie3", 16, 0.8, 10),
    Link("pcie4", 32, 0.8, 10),
    Link("pcie5", 64, 0.85, 10),
    Link("nvlink-c2c", 450, 0.9, 5),              # GH200 CPU-GPU, 450 GB/s each way
]}
# narrower slots, each generation at x8 (a second card's slot; the RTX 4060 Ti's own width) and x4 (chipset lanes, an
# OCuLink eGPU): the lanes' share of the x16 rate (PCIe's rate is per lane)
LINKS.update({f"{x16}-x{lanes}": replace(LINKS[x16], name=f"{x16}-x{lanes}", gbps=LINKS[x16].gbps * lanes / 16)
              for x16 in ("pcie3", "pcie4", "pcie5") for lanes in (8, 4)})
# a Thunderbolt 3/4 eGPU: its PCIe 3.0 x4 tunnel (32 Gbit/s) reaches 19-22 Gbit/s host to device (docs/hardware.md);
# an OCuLink eGPU is pcie4-x4
LINKS["thunderbolt"] = Link("thunderbolt", 4.0, 0.65, 10)
UNIFIED = "unified"  # a machine's link where its GPU shares the host's memory (``unified_link``)


def unified_link(gpu: GPU) -> Link:
    """What stands for the link of a GPU that shares the host's memory: no expert crosses one at decode, and the one
    copy an engine may make (llama.cpp's prompt-time copy of the CPU layers' experts) is within that memory, which
    reads and writes each byte: half its bandwidth, at the share a kernel reaches."""
    return Link(UNIFIED, gpu.hbm_gbps / 2, gpu.mem_eff, 0.0)
SSDS = {s.name: s for s in [
    SSD("pcie5-nvme", 7.4, 80),                   # FlashMoE Tab. 2: SK hynix P51
    SSD("pcie4-nvme", 7.0, 80),                   # a typical PCIe 4 drive (Samsung 990 Pro class)
]}
CPUS = {c.name.lower().replace(" ", "-"): c for c in [
    # per socket: cores, nominal DRAM bandwidth (channels x MT/s x 8 B); RAM as the paper's machine had it, else a
    # typical build
    # clocks: the vendor's base clock (spec sheet), a lower bound of the all-core clock (docs/hardware.md, ghz);
    # core_gbps: one core's DRAM read where a measurement of the family was published (docs/hardware.md, core_gbps)
    CPU("Ryzen-7950X", 16, 4.5, "avx512-256", 83.2, 128, core_gbps=57.0),  # base 4.5 GHz; 2 x DDR5-5200 (AMD's max)
    CPU("Ryzen-9950X", 16, 4.3, "avx512", 89.6, 96, core_gbps=50.0),   # base 4.3; Zen 5 (512-bit), 2 x DDR5-5600
    CPU("Ryzen-9600X", 6, 3.9, "avx512", 96.0, 64, core_gbps=50.0),    # base 3.9; FlashMoE Tab. 2: 4 x 16 GB DDR5-6000
    CPU("i9-10900X", 10, 3.7, "avx512", 93.9, 128),            # base 3.7; 4 x DDR4-2933 (Intel's rated maximum)
    CPU("Xeon-E5-2680v4", 14, 2.4, "avx2", 76.8, 128),         # base 2.4; CommitMoE Tab. 2 env. 2: 4 x DDR4-2400
    CPU("Xeon-W5-3435X", 16, 3.1, "amx", 307.2, 128),          # base 3.1; CommitMoE Tab. 2 env. 1: 8 x DDR5-4800
    CPU("Xeon-8470", 52, 2.0, "amx", 307.2, 2048, core_gbps=14.5),  # base 2.0; MELINOE Tab. 9 (H100 host): 8 x DDR5
    CPU("Xeon-6454S", 32, 2.2, "amx", 307.2, 512, core_gbps=14.5),  # base 2.2; kTransformers' host, a socket: 8 x DDR5
    CPU("EPYC-7J13", 64, 2.45, "avx2", 204.8, 216),            # base 2.45; MELINOE Tab. 9 (A100 host): 8 x DDR4-3200
    CPU("EPYC-7B13", 64, 2.25, "avx2", 204.8, 270),            # base 2.25; MELINOE Tab. 9 (4090 host): 8 x DDR4-3200
    CPU("Grace", 72, 3.1, "neon", 512.0, 480),                 # NVIDIA's 3.1 GHz; GH200: 480 GB LPDDR5X, 512 GB/s
    # the CPUs of the unified-memory machines: DRAM is the memory the GPU shares (its full bandwidth, more than their
    # cores reach: docs/hardware.md)
    CPU("GB10", 20, 2.6, "neon", 273.0, 128),                  # DGX Spark: 10 Cortex-X925 + 10 A725
    CPU("Ryzen-AI-Max-395", 16, 3.0, "avx512", 256.0, 128),    # Strix Halo: 16 Zen 5, base 3.0 GHz
    CPU("M2-Ultra", 24, 3.5, "neon", 800.0, 192),              # 16 performance + 8 efficiency cores
    CPU("M3-Ultra", 32, 3.5, "neon", 819.0, 512),              # 24 performance + 8 efficiency cores
    CPU("M4-Max", 16, 3.5, "neon", 546.0, 128),                # 12 performance + 4 efficiency cores
]}
# machines as the papers ran them: GPU, its host link, its host CPU. The rtx4090 machine is a desktop
# (MELINOE's RTX 4090 sits in an EPYC 7B13 server: --cpu epyc-7b13 gives that); the a6000's CPU is assumed
# (Speculating Experts Tab. 3 gives its 128 GB of DRAM only). The desktops without a GPU run everything on the CPU.
SYSTEMS = {
    "h100": ("h100", "pcie5", "xeon-8470"),               # MELINOE Tab. 9
    "a100-40g": ("a100-40g", "pcie4", "epyc-7j13"),       # MELINOE Tab. 9, Speculating Experts Tab. 3 (A100)
    "a6000": ("a6000", "pcie4", "xeon-w5-3435x"),         # Speculating Experts Tab. 3
    "rtx4090": ("rtx4090", "pcie4", "ryzen-7950x"),       # GPU and link as MELINOE Tab. 9, a desktop host
    "rtx4080": ("rtx4080", "pcie4", "ryzen-7950x"),       # desktops people run llama.cpp MoE offload on
    "rtx2080": ("rtx2080", "pcie3", "i9-10900x"),
    "rtx2080ti": ("rtx2080ti", "pcie3", "xeon-e5-2680v4"),  # CommitMoE's PCIe Gen3 environment
    "rtx5070ti": ("rtx5070ti", "pcie5", "ryzen-9600x"),   # FlashMoE Tab. 2 desktop
    "rtx3060": ("rtx3060", "pcie4", "ryzen-7950x"),       # the home cards, in a desktop (the CPU: --cpu)
    "rtx3090": ("rtx3090", "pcie4", "ryzen-7950x"),
    "rtx4060ti": ("rtx4060ti", "pcie4-x8", "ryzen-7950x"),  # an x8 card: eight lanes whatever the slot
    "rtx5090": ("rtx5090", "pcie5", "ryzen-9950x"),
    "gh200": ("gh200", "nvlink-c2c", "grace"),            # Speculating Experts Tab. 3
    "dgx-spark": ("gb10", UNIFIED, "gb10"),             # one memory, GPU and CPU
    "strix-halo": ("radeon8060s", UNIFIED, "ryzen-ai-max-395"),
    "m2-ultra": ("m2ultra", UNIFIED, "m2-ultra"),
    "m3-ultra": ("m3ultra", UNIFIED, "m3-ultra"),
    "m4-max": ("m4max", UNIFIED, "m4-max"),
    "rx7900xtx": ("rx7900xtx", "pcie4", "ryzen-7950x"),   # AMD and Intel cards in the same desktop
    "arc-b580": ("arcb580", "pcie4-x8", "ryzen-7950x"),   # an x8 card
    "arc-pro-b70": ("arcprob70", "pcie5", "ryzen-9950x"),
    "ryzen-7950x": (None, None, "ryzen-7950x"),           # CPU-only desktops
    "ryzen-9950x": (None, None, "ryzen-9950x"),
}
