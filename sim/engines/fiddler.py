"""Fiddler (Kamahori et al., ICLR 2025; github.com/efeslab/fiddler): a GPU cache of the most popular experts, a miss
run on the CPU where that beats copying it. ``infer.py --cpu-offload 1`` keeps as many experts on the GPU as its
memory holds, chosen from a popularity profile, and sets no count. Its CPU experts are PyTorch's; no figure of
their barriers is published, and llama.cpp's stand in."""

from moesim.sim.engines.base import EngineSpec

ENGINE = EngineSpec(
    name="Fiddler", summary="CPU for a miss where that is faster", source="github.com/efeslab/fiddler",
    runs=("cpu-miss",), flags=lambda params, config, model, gpu: "--cpu-offload 1",
    sources=(("cpu_ops", "not published: llama.cpp's figure"),))
