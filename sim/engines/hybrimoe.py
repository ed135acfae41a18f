"""HybriMoE (Zhong et al., 2025; github.com/PKU-SEC-Lab/HybriMoE): kTransformers with a GPU cache that changes as it
runs (any policy but ``static``). Its repository is research code whose rules keep 25, 50 or 75% of the experts of
DeepSeek-V2, Mixtral or Qwen2-MoE on the GPU, not a cache of a size asked for, so moesim gives no command. Built on
kTransformers, it times as kTransformers does."""

from dataclasses import replace

from moesim.sim.engines.base import every_setting
from moesim.sim.engines.ktransformers import ENGINE as KTRANSFORMERS
from moesim.sim.machine import ONE_POOL, PER_SOCKET

ENGINE = replace(KTRANSFORMERS, name="HybriMoE", summary="kTransformers with a dynamic GPU cache",
                 source="arXiv:2504.05897", release="", takes=every_setting, numa=PER_SOCKET, numa_options=(ONE_POOL,),
                 families=("deepseek_v2", "mixtral", "qwen2_moe"),
                 command=lambda launch: "none: research code, its rules fixed shares of the experts",
                 sources=(("numa", "built on kTransformers' archived local_chat: a pool and a copy of the experts "
                                   "per socket with USE_NUMA=1, else one pool"),
                          ("shared_overlap, cpu_ops, layer_us", "built on kTransformers: its figures"),))
