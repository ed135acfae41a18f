"""HybriMoE (Zhong et al., 2025): kTransformers with a GPU cache that changes as it runs (any policy but
``static``), research code with no settings to give. Built on kTransformers, it times as kTransformers does."""

from dataclasses import replace

from moesim.sim.engines.base import every_setting
from moesim.sim.engines.ktransformers import ENGINE as KTRANSFORMERS

ENGINE = replace(KTRANSFORMERS, name="HybriMoE", summary="kTransformers with a dynamic GPU cache",
                 source="arXiv:2504.05897", takes=every_setting, threads_flag=None,
                 flags=lambda params, config, model, gpu: "none: research code",
                 sources=(("numa, shared_overlap, cpu_ops, layer_us", "built on kTransformers: its figures"),))
