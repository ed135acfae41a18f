"""Command-line options that several commands share, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Force = Annotated[bool, typer.Option("--force", help="Replace OUT if it exists (else an existing file is refused).")]
Gamma = Annotated[Optional[float], typer.Option(help="Decay of the gamma policies (MELINOE; default 0.9).")]
Seed = Annotated[Optional[int], typer.Option(help="Seed of random and lecar (default 0).")]
MlModel = Annotated[Optional[Path], typer.Option("--ml-model", help="Model file from 'moesim train ml-ffn' (needed by "
                                                                    "ml-ffn).")]
PinTrace = Annotated[Optional[Path], typer.Option("--pin-trace", help="Trace whose popularity the static policy pins "
                                                                      "(default: TRACE).")]
Hardware = Annotated[str, typer.Option(help="Hardware preset or TOML file (see 'moesim hardware').")]
Link = Annotated[Optional[str], typer.Option(help="Swap the host link: pcie3, pcie4, pcie5, nvlink-c2c.")]
Cpu = Annotated[Optional[str], typer.Option(help="Swap the host CPU for a preset (see 'moesim hardware').")]
Vram = Annotated[Optional[float], typer.Option(help="GPU memory in GiB (default: the GPU's).")]
Ram = Annotated[Optional[float], typer.Option(help="Host RAM in GiB (default: the machine's).")]
Dtype = Annotated[Optional[str], typer.Option(help="Expert precision: bf16, fp8, q8_0, q4_k, mxfp4, int4, int2, fp32 "
                                                   "(default: the trace's expert bytes, else bf16).")]
Strategy = Annotated[str, typer.Option(help="Where experts run: gpu-cache, cpu-experts (llama.cpp --n-cpu-moe), "
                                            "cpu-miss (Fiddler), hybrid (kTransformers), lowbit-miss (HOBBIT).")]
CpuLayers = Annotated[Optional[str], typer.Option("--cpu-layers", help="cpu-experts: the first N MoE layers keep their "
                                                  "experts on the CPU; auto (default): the fewest that fit.")]
LowbitThreshold = Annotated[Optional[float], typer.Option(help="lowbit-miss: gate weight below which a miss fetches "
                                                               "the low-bit copy (default 0.2).")]
LowbitDtype = Annotated[Optional[str], typer.Option(help="lowbit-miss: int4 (default) or int2.")]
OtherDtype = Annotated[Optional[str], typer.Option("--other-dtype", help="Precision of every other weight (attention, "
                                                  "embeddings, shared experts): as --dtype (default: bf16).")]
Split = Annotated[str, typer.Option(help="uniform: C slots in every layer; best: the layers' slots shared out "
                                         "the way that maximises the policy's hits on the trace (per-layer "
                                         "scope; exact, from its hit rate at every capacity).")]
Model = Annotated[Optional[str], typer.Option(help="Model preset (default: the trace's model; see 'moesim models').")]
Ssd = Annotated[Optional[str], typer.Option(help="Add an SSD preset (pcie5-nvme, pcie4-nvme).")]
Scope = Annotated[str, typer.Option(help="per-layer or global.")]
DramCapacity = Annotated[Optional[int], typer.Option("--dram-capacity", help="Experts host DRAM caches in front of the "
                                                     "SSD (needs --ssd); default: all in DRAM.")]
Mode = Annotated[str, typer.Option(help="After a misprediction: fallback (fetch the right experts) or commit (run the "
                                        "predicted ones, CommitMoE).")]
Kernel = Annotated[str, typer.Option(help="fused: a layer's experts in one kernel once all are on the GPU (vLLM); "
                                          "per-expert: each as its weights land (Mixtral-offloading).")]
Context = Annotated[int, typer.Option(help="KV tokens added to every sequence (a prompt the trace did not record, not "
                                           "computed).")]
Prompt = Annotated[int, typer.Option(help="A prompt of N tokens prefilled before each sequence the trace recorded "
                                          "without one (TTFT).")]
TrainTrace = Annotated[Optional[Path], typer.Option("--train-trace", help="Trace the history and popular prefetchers "
                                                    "learn from (default: TRACE itself).")]
ConfigFile = Annotated[Optional[Path], typer.Option("--config", help="Start from this configuration file (TOML: [model] "
                                                    "[hardware] [cache] [prefetch] [execution] [workload] [serve]); "
                                                    "options given here override it.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
