"""The vLLM logging recipe (examples/vllm_routing_log.py) against a stand-in vLLM: its output imports."""

import runpy
import sys
import types
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from moesim.tracegen.hf import tiny_model  # noqa: E402
from moesim.tracegen.importers import import_trace
from moesim.tracegen.io import load_trace  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "vllm_routing_log.py"
LAYERS, K, E = 4, 2, 8


def _fake_vllm(monkeypatch, lengths):
    """A vLLM whose generate() routes prompt then decode rows through FusedMoE.select_experts."""
    rng = np.random.default_rng(0)

    class FusedMoE:
        @staticmethod
        def select_experts(rows):
            ids = torch.tensor(np.stack([rng.choice(E, K, replace=False) for _ in range(rows)]))
            return torch.full((rows, K), 0.5), ids

    class LLM:
        def __init__(self, *a, **kw):
            assert kw["enforce_eager"] and kw["max_num_seqs"] == 1
            FusedMoE.select_experts(7)  # the profiling run before any prompt

        def generate(self, prompts, params, use_tqdm):
            rows = [lengths[len(self.__dict__.setdefault("seen", []))]] + [1] * (params.max_tokens - 1)
            self.seen.append(prompts)
            for n in rows:
                for _ in range(LAYERS):
                    layer_mod.FusedMoE.select_experts(n)

    layer_mod = types.ModuleType("vllm.model_executor.layers.fused_moe.layer")
    layer_mod.FusedMoE = FusedMoE
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, lambda max_tokens, temperature: types.SimpleNamespace(max_tokens=max_tokens)
    for name in ("vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.fused_moe"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.fused_moe.layer", layer_mod)


def test_recipe_output_imports_as_a_trace(tmp_path, monkeypatch):
    model, tokenizer = tiny_model("tiny-mixtral", torch.float32)
    model.save_pretrained(tmp_path / "model")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt\nsecond\n")
    _fake_vllm(monkeypatch, lengths=[5, 3])
    out = tmp_path / "routing.jsonl"
    monkeypatch.setattr(sys, "argv", ["x", "--model", str(tmp_path / "model"), "--prompts", str(prompts),
                                      "--max-new-tokens", "4", "--out", str(out)])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    _, dropped = import_trace(out, "vllm-jsonl", tmp_path / "t.parquet")
    trace = load_trace(tmp_path / "t.parquet")
    assert dropped == 0 and trace.meta.num_layers == LAYERS and trace.meta.top_k == K
    assert trace.seq_offsets.tolist() == [0, 8, 14]
    assert trace.phase.tolist() == [0] * 5 + [1] * 3 + [0] * 3 + [1] * 3
