"""MoE-Infinity (Xue et al., 2024; github.com/EfficientMoE/MoE-Infinity): a GPU expert cache with its own
activation-aware prefetching; the cache is a share of GPU memory (``--device-memory-ratio``), not a count of
experts. Its families are those ``moe_infinity/common/constants.py`` maps; it loads a transformers checkpoint."""

from moesim.sim.engines.base import CHECKPOINT_FORMATS, EngineSpec, Launch


def takes(config) -> bool:
    """It prefetches."""
    return config.prefetch.prefetcher != "none"


def command(launch: Launch) -> str:
    """Its OpenAI-compatible server, given the share of GPU memory the run uses."""
    return (f"python -m moe_infinity.entrypoints.openai.api_server_v2 --model {launch.checkpoint} --offload-dir "
            f"./offload --device-memory-ratio {int(launch.vram_share * 100) / 100:.2f}")


ENGINE = EngineSpec(
    name="MoE-Infinity", summary="an expert cache on the GPU with prefetching",
    source="github.com/EfficientMoE/MoE-Infinity", release="pip install moe-infinity", runs=("gpu-cache",),
    takes=takes, command=command, families=("mixtral", "deepseek_v2", "deepseek_v3", "qwen3_moe", "gpt_oss", "dbrx",
                                            "olmoe"), formats=CHECKPOINT_FORMATS, layer_loop="python", layer_us=2606.0,
    sources=(("layer_us", "fitted to its 5 published points (2 groups: its README's A5000, MELINOE's H100); held "
                          "out, its median error 22% against 44% without (python benchmarks/published_offload.py "
                          "--cv, 2026-12-06)"),))
