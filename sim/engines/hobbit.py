"""HOBBIT (Tang et al., 2024): a llama.cpp fork that fetches a low-bit copy of a missed expert of low gate weight.
It has no public release, so no settings to give."""

from moesim.sim.engines.base import EngineSpec

ENGINE = EngineSpec(name="HOBBIT (llama.cpp fork)", summary="low-bit copies of less critical misses",
                    source="arXiv:2411.01433", runs=("lowbit-miss",),
                    flags=lambda params, config, model, gpu: "none: no public release")
