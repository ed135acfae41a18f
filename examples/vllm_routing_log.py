"""Log a vLLM model's expert routing in moesim's vllm-jsonl format (a recipe; needs vLLM and a GPU).

    python examples/vllm_routing_log.py --model mistralai/Mixtral-8x7B-v0.1 --prompts prompts.txt \
        --max-new-tokens 128 --out routing.jsonl
    moesim trace import routing.jsonl --format vllm-jsonl --model mixtral-8x7b --out t.parquet

It wraps the function vLLM's fused-MoE layers call to route (by default
`vllm.model_executor.layers.fused_moe.layer:FusedMoE.select_experts`, which returns
(topk_weights, topk_ids)); where your vLLM routes elsewhere, pass that function's path with
`--hook module:Class.method`. To make each call's rows map to token positions it runs one prompt
at a time, in eager mode (no CUDA graphs, no torch.compile: both would skip the Python wrapper),
in-process, without prefix caching or chunked prefill. The k-th routing call of a forward pass
is MoE layer k mod L. Output: one JSON object per (token, layer): problem_id, layer, token_idx,
phase (0 prefill, 1 decode), experts, gating_probs.

moesim's tests do not run this script (no vLLM or GPU on CI); `trace import` checks its output.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True, help="one prompt per line")
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dataset", default="prompts", help="written to each record's 'dataset'")
    parser.add_argument("--layers", type=int, help="MoE layers per forward pass [default: from the config]")
    parser.add_argument("--hook", default="vllm.model_executor.layers.fused_moe.layer:FusedMoE.select_experts")
    args = parser.parse_args()

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine must run in this process
    from transformers import AutoConfig
    from vllm import LLM, SamplingParams

    config = AutoConfig.from_pretrained(args.model)
    layers = args.layers or sum(_is_moe_layer(config, i) for i in range(config.num_hidden_layers))
    calls: list[tuple[list, list]] = []  # (weights, ids) of every routing call, in order
    _wrap(args.hook, calls)
    llm = LLM(args.model, enforce_eager=True, enable_prefix_caching=False, enable_chunked_prefill=False,
              max_num_seqs=1, compilation_config={"level": 0}, tensor_parallel_size=1)
    params = SamplingParams(max_tokens=args.max_new_tokens, temperature=0.0)
    prompts = [line for line in open(args.prompts, encoding="utf-8").read().splitlines() if line.strip()]
    with open(args.out + ".tmp", "w", encoding="utf-8") as out:
        for problem, prompt in enumerate(prompts):
            calls.clear()
            llm.generate([prompt], params, use_tqdm=False)
            position = 0
            for forward in range(len(calls) // layers):  # forward 0 is the prefill
                for layer in range(layers):
                    weights, ids = calls[forward * layers + layer]
                    for row, (w, e) in enumerate(zip(weights, ids)):
                        out.write(json.dumps({"dataset": args.dataset, "problem_id": problem, "layer": layer,
                                              "token_idx": position + row, "phase": int(forward > 0),
                                              "experts": e, "gating_probs": w}) + "\n")
                position += len(calls[forward * layers][1])
    os.replace(args.out + ".tmp", args.out)


def _is_moe_layer(config, i: int) -> bool:
    """DeepSeek's first dense layers and Qwen-MoE's sparse step / MLP-only layers have no router."""
    if i < (getattr(config, "first_k_dense_replace", 0) or 0) or i in (getattr(config, "mlp_only_layers", None) or []):
        return False
    return (i + 1) % (getattr(config, "decoder_sparse_step", 1) or 1) == 0


def _wrap(path: str, calls: list) -> None:
    """Replace the routing function at `module:Class.method` with one that records its output."""
    module_name, qualname = path.split(":")
    owner = importlib.import_module(module_name)
    *parents, name = qualname.split(".")
    for part in parents:
        owner = getattr(owner, part)
    raw = owner.__dict__[name]
    func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw

    @functools.wraps(func)
    def recording(*a, **kw):
        out = func(*a, **kw)
        calls.append((out[0].float().cpu().tolist(), out[1].cpu().tolist()))
        return out

    setattr(owner, name, type(raw)(recording) if isinstance(raw, (staticmethod, classmethod)) else recording)


if __name__ == "__main__":
    main()
