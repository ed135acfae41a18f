"""Fiddler (Kamahori et al., ICLR 2025; github.com/efeslab/fiddler): a GPU cache of the most popular experts, a miss
run on the CPU where that beats copying it. ``infer.py --cpu-offload 1`` keeps as many experts on the GPU as its
memory holds, chosen from a popularity profile, and sets no count. Its README: a 16-bit Mixtral-8x7B only. Its CPU
experts are PyTorch's at 16 threads (``torch.set_num_threads(16)``, no option), as its rows are timed (fewer on a
machine of fewer cores); no figure of their barriers is published, and llama.cpp's stand in."""

from moesim.sim.engines.base import CHECKPOINT_FORMATS, EngineSpec, Launch


def command(launch: Launch) -> str:
    return f"python src/fiddler/infer.py --model {launch.checkpoint} --cpu-offload 1"


ENGINE = EngineSpec(
    name="Fiddler", summary="CPU for a miss where that is faster", source="github.com/efeslab/fiddler",
    release="github.com/efeslab/fiddler (research code with a command line)", runs=("cpu-miss",), command=command,
    families=("mixtral",), formats=CHECKPOINT_FORMATS, threads=16, layer_loop="python", layer_us=3561.0,
    sources=(("cpu_ops", "not published: llama.cpp's figure"),
             ("threads", "src/fiddler/mixtral.py: torch.set_num_threads(16)"),
             ("layer_us", "fitted to its 2 published points (1 group: MELINOE's H100), shipped as the Python engines' "
                          "pool chose held out; held out, taking the pool's time, its median error 31% against 204% "
                          "without (python benchmarks/published_offload.py --cv, 2026-12-07)")))
