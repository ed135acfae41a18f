"""trace record: every supported family's tiny model, checked against the model's own router logits."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from moesim.errors import MoesimError  # noqa: E402
from moesim.tracegen.families import TINY_MODELS, is_router  # noqa: E402
from moesim.tracegen.hf import load_model, tiny_model  # noqa: E402
from moesim.tracegen.io import load_trace  # noqa: E402
from moesim.tracegen.record import RecordOptions, record_trace  # noqa: E402
from moesim.tracegen.schema import DECODE, PREFILL  # noqa: E402

# its module-scoped fixtures are built once: its tests run on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_record")

PROMPTS = ["The quick brown fox", "Mixture of experts models route each token", "to a few experts"]
NEW = 16
EXACT = RecordOptions(max_new_tokens=NEW, dtype="float64", probs=True, speculate=True, ignore_eos=True)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    return path


def reference_routing(model, logits: np.ndarray, router) -> tuple[np.ndarray, np.ndarray]:
    """Experts [T, k] in rank order and their weights, from router logits [T, E], written from each
    family's definition (not by calling the router)."""
    cfg, k = model.config, model.config.num_experts_per_tok
    kind = cfg.model_type
    if kind == "deepseek_v3":
        scores = 1 / (1 + np.exp(-logits))
        choice = scores + router.e_score_correction_bias.detach().double().numpy()
        groups = choice.reshape(len(choice), cfg.n_group, -1)
        group_score = np.sort(groups, axis=-1)[..., -2:].sum(-1)
        keep = np.argsort(-group_score, axis=-1, kind="stable")[:, :cfg.topk_group]
        mask = np.zeros_like(group_score, dtype=bool)
        np.put_along_axis(mask, keep, True, axis=-1)
        choice = np.where(np.repeat(mask, groups.shape[-1], axis=-1), choice, -np.inf)
        chosen = np.argsort(-choice, axis=-1, kind="stable")[:, :k]
        weights = np.take_along_axis(scores, chosen, -1)
        if cfg.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdims=True)
        weights = weights * cfg.routed_scaling_factor
        order = np.argsort(-weights, axis=-1, kind="stable")
        return np.take_along_axis(chosen, order, -1), np.take_along_axis(weights, order, -1)
    if kind == "phimoe":  # sparsemixer (eval): pick by logit, weigh by a softmax over near-ties
        eps, scores, picks, weights = cfg.router_jitter_noise, logits.copy(), [], []
        for _ in range(k):
            top = scores.max(-1, keepdims=True)
            near = (top - logits) / np.maximum(np.abs(logits), top) <= 2 * eps
            gates = np.exp(np.where(near, scores, -np.inf) - top)
            pick = scores.argmax(-1)[:, None]
            picks.append(pick)
            weights.append(np.take_along_axis(gates, pick, -1) / gates.sum(-1, keepdims=True))
            np.put_along_axis(scores, pick, -np.inf, -1)
        return np.hstack(picks), np.hstack(weights)
    chosen = np.argsort(-logits, axis=-1, kind="stable")[:, :k]  # softmax keeps the order of the logits
    top = np.take_along_axis(logits, chosen, -1)
    if kind == "gpt_oss":
        weights = np.exp(top - top.max(-1, keepdims=True))
        return chosen, weights / weights.sum(-1, keepdims=True)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    weights = np.take_along_axis(probs, chosen, -1)
    if kind == "mixtral" or getattr(cfg, "norm_topk_prob", False):
        weights = weights / weights.sum(-1, keepdims=True)
    if kind == "deepseek_v2":
        weights = weights * cfg.routed_scaling_factor
    return chosen, weights


@pytest.mark.parametrize("name", list(TINY_MODELS))
def test_recorded_experts_are_the_models_own_router_topk(name, prompts, tmp_path):
    out = tmp_path / "t.parquet"
    summary = record_trace(name, prompts, out, EXACT)
    trace = load_trace(out, probs=True)
    model, _, _, _ = load_model(name, "float64")
    routers = [m for m in model.modules() if is_router(m)]
    assert trace.num_sequences == 3 and summary.decode_rows == 3 * (NEW - 1)
    assert trace.meta.num_layers == len(routers) and trace.meta.d_model == model.config.hidden_size
    for s in range(3):
        rows = slice(trace.seq_offsets[s], trace.seq_offsets[s + 1])
        phase, steps = trace.phase[rows], trace.steps[rows]
        assert (phase[:-(NEW - 1)] == PREFILL).all() and (phase[-(NEW - 1):] == DECODE).all()
        assert np.array_equal(steps, np.arange(len(steps)))
        inputs = []
        hooks = [r.register_forward_pre_hook(lambda m, a: inputs.append(a[0].reshape(-1, a[0].shape[-1])))
                 for r in routers]
        with torch.no_grad():  # one pass over prompt + generated tokens, no KV cache
            full = model(torch.tensor(trace.tokens[rows])[None].long(), output_router_logits=True, use_cache=False)
        for h in hooks:
            h.remove()
        logits = np.stack([t.double().numpy() for t in full.router_logits], axis=1)  # [T, L, E]
        for layer, router in enumerate(routers):
            experts, weights = reference_routing(model, logits[:, layer], router)
            assert np.array_equal(trace.experts[rows][:, layer], experts), (name, s, layer)
            np.testing.assert_allclose(trace.weights[rows][:, layer], weights, rtol=1e-5)
            probs = np.exp(logits[:, layer] - logits[:, layer].max(-1, keepdims=True))
            np.testing.assert_allclose(trace.probs[rows][:, layer], probs / probs.sum(-1, keepdims=True), rtol=1e-5)
            if layer + 1 < len(routers):  # spec: the next router on this layer's router input
                with torch.no_grad():
                    ahead = routers[layer + 1].forward(inputs[layer])[0].double().numpy()
                assert np.array_equal(trace.spec[rows][:, layer], reference_routing(model, ahead, routers[layer + 1])[0])
            else:
                assert (trace.spec[rows][:, layer] == -1).all()


@pytest.mark.parametrize("name", ["tiny-qwen2moe", "tiny-deepseek"])
def test_saved_model_records_the_same_trace(name, prompts, tmp_path):
    model, tokenizer = tiny_model(name, torch.float64)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    opts = RecordOptions(max_new_tokens=8, speculate=True, dtype="float64")
    record_trace(name, prompts, tmp_path / "a.parquet", opts)
    record_trace(str(folder), prompts, tmp_path / "b.parquet", opts)
    a, b = load_trace(tmp_path / "a.parquet"), load_trace(tmp_path / "b.parquet")
    for col in ("experts", "spec", "tokens", "steps", "phase", "seq_offsets"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    # DeepSeek's router and norms run in float32 whatever the model's dtype (as transformers
    # writes them), and a float32 GEMM can round an ulp differently with its buffers' alignment
    np.testing.assert_allclose(a.weights, b.weights, rtol=4e-7, atol=0)
    assert a.meta.replace(model="", source="") == b.meta.replace(model="", source="")


def test_batched_recording_equals_one_by_one(prompts, tmp_path):
    one = RecordOptions(max_new_tokens=NEW, dtype="float64")
    record_trace("tiny-mixtral", prompts, tmp_path / "a.parquet", one)
    record_trace("tiny-mixtral", prompts, tmp_path / "b.parquet", RecordOptions(max_new_tokens=NEW, dtype="float64", batch_size=3))
    a, b = load_trace(tmp_path / "a.parquet"), load_trace(tmp_path / "b.parquet")
    for col in ("experts", "tokens", "steps", "phase", "seq_offsets"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col


def test_sampling_is_seeded_and_chat_template_applies(prompts, tmp_path):
    opts = RecordOptions(max_new_tokens=8, temperature=1.0, seed=3, chat=True)
    for name in ("a", "b"):
        record_trace("tiny-olmoe", prompts, tmp_path / f"{name}.parquet", opts)
    a, b = load_trace(tmp_path / "a.parquet"), load_trace(tmp_path / "b.parquet")
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.experts, b.experts)
    record_trace("tiny-olmoe", prompts, tmp_path / "c.parquet", RecordOptions(max_new_tokens=8))
    plain = load_trace(tmp_path / "c.parquet")
    assert a.prefill_steps > plain.prefill_steps  # the template's role markers are prompt tokens too


def test_eos_ends_a_sequence(prompts, tmp_path):
    """Without --ignore-eos a sequence stops at EOS: the EOS token is generated but never fed back."""
    model, tokenizer, _, _ = load_model("tiny-gptoss")
    eos = model.generation_config.eos_token_id
    record_trace("tiny-gptoss", prompts, tmp_path / "t.parquet", RecordOptions(max_new_tokens=200))
    trace = load_trace(tmp_path / "t.parquet")
    decode = trace.tokens[trace.phase == DECODE]
    assert eos not in decode.tolist()


def test_record_cli_then_info_prints_real_dims(cli, prompts, tmp_path):
    out = tmp_path / "t.parquet"
    code, text, err = cli("trace", "record", "--model", "tiny-qwen2moe", "--prompts", prompts, "--max-new-tokens", "4",
                          "--probs", "--speculate", "--out", out)
    assert code == 0, err
    assert "3 sequences, 77 prefill + 9 decode steps" in " ".join(text.split())
    code, text, _ = cli("trace", "info", out, "--json")
    info = json.loads(text)
    assert {k: info[k] for k in ("layers", "experts", "top_k", "d_model", "d_expert", "shared_experts", "d_shared",
                                 "bytes_per_param", "expert_bytes", "decode_steps")} == {
        "layers": 4, "experts": 8, "top_k": 2, "d_model": 64, "d_expert": 32, "shared_experts": 1, "d_shared": 64,
        "bytes_per_param": 4.0, "expert_bytes": 3 * 64 * 32 * 4, "decode_steps": 9}
    assert set(info["has"]) == {"weights", "probs", "spec", "token"}


def _bad_inputs(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "fine"}\n{"text": "no prompt field"}\n')
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
                                                   "num_attention_heads": 1, "vocab_size": 10}))
    good = tmp_path / "good.txt"
    good.write_text("hello\n")
    return [
        (["--model", "tiny-mixtral", "--prompts", empty], "empty.txt: no prompts"),
        (["--model", "tiny-mixtral", "--prompts", broken], "broken.jsonl:2: needs a non-empty string field 'prompt'"),
        (["--model", "tiny-mixtral", "--prompts", tmp_path / "none.txt"], "none.txt: no such prompts file"),
        (["--model", tmp_path / "missing", "--prompts", good], "missing: no such model folder"),
        (["--model", llama, "--prompts", good], "architecture 'llama' is not supported"),
        (["--model", "tiny-mixtral", "--prompts", good, "--dtype", "int3"], "unknown dtype 'int3'"),
    ]


def test_bad_input_is_one_line_and_leaves_no_file(cli, tmp_path):
    out = tmp_path / "out" / "t.parquet"
    out.parent.mkdir()
    for args, message in _bad_inputs(tmp_path):
        code, _, err = cli("trace", "record", *args, "--out", out)
        assert code == 1 and message in err and err.count("\n") == 1, (args, err)
        assert not any(out.parent.iterdir()), args


def test_random_presets_have_the_presets_moe_dims():
    """random-<preset> builds the family's architecture at the preset's dims (checked on the meta device)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from moesim.tracegen.models import MODELS
    from moesim.tracegen.families import FAMILIES
    from moesim.tracegen.hf import _random_dims

    for name, spec in MODELS.items():
        if spec.architecture not in FAMILIES:
            continue
        family, dims = _random_dims(f"random-{name}")
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(family.model_type, **dims))
        routers = [m for m in model.modules() if is_router(m)]
        experts = model.get_submodule(next(n for n, m in model.named_modules() if is_router(m)).rsplit(".", 1)[0]).experts
        per_expert = sum(p.numel() for p in experts.parameters()) // spec.num_experts
        assert len(routers) == spec.num_layers, name
        assert per_expert == spec.expert_params + (8640 if spec.architecture == "gpt_oss" else 0), name  # + biases


def test_chunked_writing_gives_the_same_file(prompts, tmp_path, monkeypatch):
    """Rows spill to part files per chunk and are joined at the end; nothing is left beside the output."""
    from moesim.tracegen import record

    opts = RecordOptions(max_new_tokens=6, speculate=True, probs=True)
    record_trace("tiny-phimoe", prompts, tmp_path / "a.parquet", opts)
    monkeypatch.setattr(record, "FLUSH_ROWS", 1)  # every prompt its own part
    record_trace("tiny-phimoe", prompts, tmp_path / "b.parquet", opts)
    a, b = load_trace(tmp_path / "a.parquet", probs=True), load_trace(tmp_path / "b.parquet", probs=True)
    for col in ("experts", "weights", "probs", "spec", "tokens", "steps", "phase", "seq_offsets", "seq_ids"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]


def test_a_folder_without_the_tokenizers_files_is_refused_in_one_line(prompts, tmp_path):
    """transformers loads an empty tokenizer from a model folder that holds none: every prompt encoded to no token,
    and generate() ended in an 80-line reshape traceback."""
    model, _ = tiny_model("tiny-qwen2moe", torch.float64)
    model.save_pretrained(tmp_path / "model")
    with pytest.raises(MoesimError, match=r"^prompt 1: the model's tokenizer encodes it to no token \(does its "
                                          r"folder hold the tokenizer's files\?\)$"):
        record_trace(str(tmp_path / "model"), prompts, tmp_path / "t.parquet", RecordOptions(max_new_tokens=2))
    assert not (tmp_path / "t.parquet").exists()
