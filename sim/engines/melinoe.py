"""MELINOE's runtime (the paper in ../shared/papers, 000_a00c3722db55defc.txt, Sec. 4.1): a per-layer cache of C
experts on the GPU under an eviction policy (LFU in its tables; its γ-cache), in PyTorch, GPU memory capped with
PyTorch's limits. Its code is not released, so no command; it runs OLMoE, Phi-3.5-MoE and Mixtral-8x7B. Its method
keeps every expert in HQQ INT4 (Sec. 3.2); the published points read its Table 1 baselines as 16-bit (their note), so
its framework time, learned from them with the other Python engines' (``layer_loop``), may hold some of that."""

from moesim.sim.engines.base import CHECKPOINT_FORMATS, EngineSpec


def takes(config) -> bool:
    """A cache of C experts in each layer."""
    return config.cache.scope == "per-layer"


ENGINE = EngineSpec(name="MELINOE runtime", summary="a per-layer expert cache on the GPU (research code)",
                    source="MELINOE (../shared/papers/000_a00c3722db55defc.txt)", runs=("gpu-cache",), takes=takes,
                    families=("olmoe", "phimoe", "mixtral"), formats=CHECKPOINT_FORMATS, layer_loop="python",
                    layer_us=2810.0, command=lambda launch: "none: no public release",
                    sources=(("layer_us", "fitted to its paper's 6 points (1 group: its H100), shipped as the Python "
                                          "engines' pool chose held out; held out, taking the pool's time, its median "
                                          "error 26% against 125% without (python benchmarks/published_offload.py "
                                          "--cv, 2026-12-07)"),))
