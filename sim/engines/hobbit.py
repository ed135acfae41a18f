"""HOBBIT (Tang et al., 2024): a llama.cpp fork that fetches a low-bit copy of a missed expert of low gate weight.
It has no public release, so no command to give; its paper runs Mixtral and Phi-3.5-MoE."""

from moesim.sim.engines.base import EngineSpec

ENGINE = EngineSpec(name="HOBBIT (llama.cpp fork)", summary="low-bit copies of less critical misses",
                    source="arXiv:2411.01433", runs=("lowbit-miss",), families=("mixtral", "phimoe"),
                    command=lambda launch: "none: no public release")
