"""Models from files (``moesim.tracegen.model_files``): a GGUF written here with the ``gguf`` package, its
tensors in several formats, read back exactly (shape, every tensor's bytes, formats); transformers
configs of every family moesim knows; what is not a mixture of experts, or not a model file, refused
in one line; and the command line and the API taking a file wherever they take a preset."""

import json
from pathlib import Path

import pytest

import moesim
from moesim.errors import MoesimError
from moesim.tracegen.model_files import spec_from_config
from moesim.tracegen.models import MODELS, get_model

pytest.importorskip("gguf")
from ggufs import D, D_DENSE, D_EXPERT, E, SHARED, VOCAB, write_gguf  # noqa: E402


def test_a_gguf_header_gives_the_shape_and_every_tensors_bytes(tmp_path):
    path = tmp_path / "test-moe.gguf"
    sizes = write_gguf(path)
    m = get_model(str(path))
    assert (m.num_layers, m.num_experts, m.top_k, m.d_model, m.d_expert) == (2, E, 2, D, D_EXPERT)
    assert (m.dense_layers, m.d_dense, m.shared_experts, m.d_shared, m.vocab) == (1, D_DENSE, SHARED, D_EXPERT, VOCAB)
    assert not m.tied_embeddings and m.architecture == "qwen2moe" and m.family == "qwen2_moe" and m.name == "test-moe"
    experts = sum(v for k, v in sizes.items() if "_exps." in k)
    assert m.stored_expert_bytes == experts / (2 * E)
    assert m.stored_other_bytes == sum(sizes.values()) - experts
    # one expert: gate and up in Q4_K (144 B a 256-weight block), down in Q4_K in one layer and Q6_K (210 B) in the
    # other
    assert m.stored_expert_bytes == 2 * D_EXPERT * 144 * D // 256 + D * (144 + 210) / 2 * D_EXPERT // 256
    assert m.expert_format == "q4_k" and m.other_format in ("q8_0", "q6_k")
    assert m.attention_params == D * 512 + 2 * D * 128 + 512 * D  # the attention tensors' elements


def test_a_gguf_model_runs_where_a_preset_does(tmp_path):
    path = tmp_path / "test-moe.gguf"
    write_gguf(path)
    m = get_model(str(path))
    trace = moesim.synth_trace(m.num_layers, m.num_experts, m.top_k, sequences=1, tokens=8, seed=0, model=str(path))
    r = moesim.simulate(trace, model=str(path), hardware="rtx4090", capacity=2)
    assert r.model == "test-moe" and r.tpot_s > 0
    # the experts' bytes are the file's, not a format's: a copy moves the stored expert
    assert r.bytes_h2d == r.loads * m.stored_expert_bytes
    q8 = moesim.simulate(trace, model=str(path), hardware="rtx4090", capacity=2, dtype="q8_0")
    assert q8.bytes_h2d == q8.loads * m.expert_params * 34 / 32


def test_a_gguf_on_the_command_line_says_the_format_it_stores(cli, tmp_path):
    """Its weights run as stored, named in the table's title (with the engine the run is timed as): the file's name
    for its storage (without a general.file_type, its main expert type: gate/up Q4_K) and the experts' mix; a list of
    CPU layers gives a row each, placed as "layers on CPU n/L"."""
    path = tmp_path / "test-moe.gguf"
    sizes = write_gguf(path)
    experts = sum(nbytes for name, nbytes in sizes.items() if "_exps." in name)
    q6_k = sizes["blk.2.ffn_down_exps.weight"]  # the second MoE layer's down projections
    trace = tmp_path / "t.parquet"
    code, _, err = cli("trace", "synth", "--model", path, "--sequences", "1", "--tokens", "6", "--out", trace)
    assert code == 0, err
    code, out, err = cli("sim", "run", trace, "--model", path, "--hardware", "rtx4090", "--strategy", "cpu-experts",
                         "--cpu-layers", "1,2")
    assert code == 0, err
    text = " ".join(out.split())
    assert (f"strategy cpu-experts as llama.cpp, weights Q4_K (the file's: experts q4_k {1 - q6_k / experts:.0%} + q6_k "
            f"{q6_k / experts:.0%}; other weights ") in text
    assert "layers on CPU 1/2" in text and "layers on CPU 2/2" in text


@pytest.mark.parametrize("blocks, message", [(("dense", "dense"), "dense model")])
def test_a_dense_gguf_is_refused(tmp_path, blocks, message):
    path = tmp_path / "dense.gguf"
    write_gguf(path, blocks)
    with pytest.raises(MoesimError, match=message):
        get_model(str(path))


def test_not_a_gguf_is_one_line(tmp_path):
    for data in (b"", b"GGML", b"GGUF" + bytes(20), b"not a model at all" * 10):
        path = tmp_path / "x.gguf"
        path.write_bytes(data)
        with pytest.raises(MoesimError, match="x.gguf") as err:
            get_model(str(path))
        assert "\n" not in str(err.value)
    with pytest.raises(MoesimError, match="no such model file"):
        get_model(str(tmp_path / "missing.gguf"))


# families' configs as their authors write them (the shape's keys only), and the spec each must give
FAMILIES = {
    "mixtral": ({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_local_experts": 8,
                 "num_experts_per_tok": 2, "intermediate_size": 14336, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "vocab_size": 32000}, MODELS["mixtral-8x7b"]),
    "qwen3_moe": ({"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_experts": 128,
                   "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
                   "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                   "decoder_sparse_step": 1, "mlp_only_layers": []}, MODELS["qwen3-30b-a3b"]),
    "qwen2_moe": ({"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_experts": 60,
                   "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                   "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 16,
                   "vocab_size": 151936}, MODELS["qwen1.5-moe-a2.7b"]),
    "deepseek_v3": ({"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
                     "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
                     "n_shared_experts": 1, "first_k_dense_replace": 3, "intermediate_size": 18432,
                     "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                     "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280}, MODELS["deepseek-v3"]),
    "gpt_oss": ({"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24, "num_local_experts": 32,
                 "experts_per_token": 4, "intermediate_size": 2880, "num_attention_heads": 64,
                 "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088}, MODELS["gpt-oss-20b"]),
}
SHAPE = ("num_layers", "num_experts", "top_k", "d_model", "d_expert", "shared_experts", "d_shared", "q_dim",
         "kv_dim", "vocab", "dense_layers", "d_dense")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_familys_config_gives_its_shape(family):
    config, preset = FAMILIES[family]
    spec = spec_from_config(config, "x")
    assert {k: getattr(spec, k) for k in SHAPE} == {k: getattr(preset, k) for k in SHAPE}
    assert spec.attention_params == preset.attention_params and spec.non_expert_params == preset.non_expert_params


@pytest.mark.parametrize("config, message", [
    ({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}, "not a mixture"),
    ({"model_type": "mixtral", "num_local_experts": 8}, "experts per token"),
    ({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": -1}, "hidden_size"),
    ([1, 2], "JSON object"),
])
def test_configs_that_are_not_a_moe_are_one_line_errors(config, message):
    with pytest.raises(MoesimError, match=message) as err:
        spec_from_config(config, "x")
    assert "\n" not in str(err.value)


def test_a_config_file_is_a_model_on_the_command_line(cli, tmp_path):
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(FAMILIES["qwen3_moe"][0]))
    config = folder / "config.json"
    trace = tmp_path / "t.parquet"
    code, _, err = cli("trace", "synth", "--model", config, "--sequences", "1", "--tokens", "6", "--out", trace)
    assert code == 0, err
    code, out, err = cli("sim", "run", trace, "--model", config, "--dtype", "q4_k", "--capacity", "auto", "--json")
    assert code == 0, err
    (row,) = json.loads(out)["results"]
    preset = moesim.simulate(moesim.load_trace(trace), model="qwen3-30b-a3b", dtype="q4_k", capacity="auto")
    assert row["model"] == "qwen3-30b-a3b" and row["tpot_s"] == preset.tpot_s and row["capacity"] == preset.capacity


CONFIGS = Path(__file__).parent / "data" / "configs"  # real config.json files (tests/data/configs/SOURCES.md)
PRESETS = {"mixtral-8x7b": "mistralai__Mixtral-8x7B-v0.1", "qwen3-30b-a3b": "Qwen__Qwen3-30B-A3B",
           "qwen3-235b-a22b": "Qwen__Qwen3-235B-A22B", "deepseek-v2-lite": "deepseek-ai__DeepSeek-V2-Lite",
           "deepseek-v3": "deepseek-ai__DeepSeek-V3", "gpt-oss-20b": "openai__gpt-oss-20b",
           "gpt-oss-120b": "openai__gpt-oss-120b"}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_is_what_its_config_json_says(preset):
    """The presets against the models' own config.json files: every dimension, the attention's weights,
    everything but the routed experts, the KV cache a token keeps."""
    spec = get_model(str(CONFIGS / f"{PRESETS[preset]}.json"))
    want = MODELS[preset]
    fields = SHAPE + ("tied_embeddings", "attention_params", "non_expert_params", "kv_width", "architecture")
    assert {k: getattr(spec, k) for k in fields} == {k: getattr(want, k) for k in fields}


def test_a_config_json_gives_the_storage_its_quantization_config_names():
    """gpt-oss-20b: experts in MXFP4 (17 B a 32-weight block), everything else bf16; DeepSeek-V3: FP8 (1 B a weight)
    for every Linear (attention, shared experts, the dense layers' FFNs), bf16 the embeddings, head, routers and
    norms; a config without one stores nothing of its own."""
    oss, ds = (get_model(str(CONFIGS / f"{name}.json")) for name in ("openai__gpt-oss-20b", "deepseek-ai__DeepSeek-V3"))
    assert (oss.storage, oss.expert_format, oss.other_format, oss.other_mix) == ("MXFP4", "mxfp4", "bf16", ())
    assert oss.stored_expert_bytes == 3 * 2880 * 2880 * 17 / 32
    assert oss.stored_other_bytes == 2 * MODELS["gpt-oss-20b"].non_expert_params
    assert (ds.storage, ds.expert_format, ds.stored_expert_bytes) == ("FP8", "fp8", 3 * 7168 * 2048)
    d, vocab, layers = 7168, 129280, 61
    dense = vocab * d * 2 + 58 * d * 256 + layers * 2 * d + d  # embeddings and head, routers, norms
    assert ds.stored_other_bytes == 2 * dense + (MODELS["deepseek-v3"].non_expert_params - dense)
    assert dict(ds.other_mix) == pytest.approx({"bf16": 2 * dense / ds.stored_other_bytes,
                                                "fp8": 1 - 2 * dense / ds.stored_other_bytes})
    plain = get_model(str(CONFIGS / "Qwen__Qwen3-30B-A3B.json"))
    assert (plain.storage, plain.stored_expert_bytes, plain.stored_other_bytes) == ("", 0, 0)


QWEN = FAMILIES["qwen3_moe"][0]


@pytest.mark.parametrize("quantization, storage, experts, attention, embeddings", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "AWQ 4-bit", "int4", "int4", "f16"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "GPTQ 8-bit", "int8", "int8", "f16"),
    # an FP8 checkpoint that keeps its attention in 16 bits
    ({"quant_method": "fp8", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}, "FP8", "fp8", "f16",
     "f16"),
    # modules that are a few weights of a part (the router, one projection) leave the part quantised
    ({"quant_method": "awq", "bits": 4, "modules_to_not_convert": ["gate", "shared_expert_gate",
                                                                   "model.layers.0.self_attn.q_proj"]},
     "AWQ 4-bit", "int4", "int4", "f16"),
])
def test_awq_gptq_and_fp8_configs_store_each_part_as_they_quantise_it(quantization, storage, experts, attention,
                                                                      embeddings):
    from moesim.tracegen.model_spec import BYTES_PER_PARAM

    spec = spec_from_config({**QWEN, "torch_dtype": "float16", "quantization_config": quantization}, "x")
    preset = MODELS["qwen3-30b-a3b"]
    assert (spec.storage, spec.expert_format) == (storage, experts)
    assert spec.stored_expert_bytes == preset.expert_params * BYTES_PER_PARAM[experts]
    attn = (48 * preset.attention_params)
    assert spec.stored_other_bytes == attn * BYTES_PER_PARAM[attention] + (
        preset.non_expert_params - attn) * BYTES_PER_PARAM[embeddings]


def test_a_module_kept_that_is_a_piece_of_a_part_leaves_the_part_quantised():
    """Qwen2-MoE's AWQ checkpoints keep the router (``gate``) and the shared expert's one-output gate
    (``shared_expert_gate``) unquantised: the shared experts stay int4 (a name's last module, not a substring, names a
    part); ``shared_expert`` itself keeps them in 16 bits."""
    awq = {"quant_method": "awq", "bits": 4}
    base = FAMILIES["qwen2_moe"][0]
    plain, pieces, whole = (spec_from_config({**base, "quantization_config": {**awq, "modules_to_not_convert": kept}},
                                             "x") for kept in ([], ["gate", "shared_expert_gate"],
                                                               ["model.layers.*.mlp.shared_expert"]))
    assert pieces.stored_other_bytes == plain.stored_other_bytes
    shared = plain.non_expert_parts["shared experts"]
    assert whole.stored_other_bytes == pytest.approx(plain.stored_other_bytes + shared * (2 - (4 + 16 / 128) / 8))


@pytest.mark.parametrize("quantization, storage", [({"quant_method": "bitsandbytes", "load_in_4bit": True},
                                                    "bitsandbytes"),
                                                   ({"quant_method": "awq", "bits": 3}, "AWQ 3-bit")])
def test_a_quantization_moesim_cannot_price_needs_the_formats_named(quantization, storage, tmp_path):
    """Its storage is kept by name, with no bytes: a plan or a run that would take it as the model's formats is one
    line naming it; named formats plan and run."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**QWEN, "quantization_config": quantization}))
    assert get_model(str(config)).storage == storage
    trace = moesim.synth_trace(48, 128, 8, sequences=1, tokens=4, seed=0, model=str(config))
    run = dict(model=str(config), hardware="rtx4090", strategy="cpu-experts")
    for call in (lambda: moesim.plan(str(config), "rtx4090"), lambda: moesim.simulate(trace, **run, dtype="q4_k")):
        with pytest.raises(MoesimError, match=f"stores its weights as {storage}, a quantization moesim") as err:
            call()
        assert "\n" not in str(err.value) and "dtype" in str(err.value)
    assert {r.format for r in moesim.plan(str(config), "rtx4090", dtypes=["q4_k"]).rows} == {"q4_k"}
    assert moesim.simulate(trace, **run, dtype="q4_k", other_dtype="q4_k").tpot_s > 0


@pytest.mark.parametrize("quantization, message", [([1], "quantization_config must be an object with a quant_method"),
                                                   ({"bits": 4}, "with a quant_method"),
                                                   ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"},
                                                    "modules_to_not_convert must be a list of module names")])
def test_a_damaged_quantization_config_is_one_line(quantization, message):
    with pytest.raises(MoesimError, match=message) as err:
        spec_from_config({**QWEN, "quantization_config": quantization}, "x")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, shape", [
    # (MoE layers, dense layers, experts, top-k, d, expert width, shared experts), from the files' own keys
    ("moonshotai__Kimi-K2-Instruct", (60, 1, 384, 8, 7168, 2048, 1)),
    ("zai-org__GLM-4.5", (89, 3, 160, 8, 5120, 1536, 1)),
    ("meta-llama__Llama-4-Scout-17B-16E-Instruct", (48, 0, 16, 1, 5120, 8192, 1)),
])
def test_models_without_a_preset_are_read_from_their_config_json(name, shape):
    spec = get_model(str(CONFIGS / f"{name}.json"))
    assert (spec.num_layers, spec.dense_layers, spec.num_experts, spec.top_k, spec.d_model, spec.d_expert,
            spec.shared_experts) == shape


@pytest.mark.parametrize("name", ["meta-llama__Llama-3.1-8B", "Qwen__Qwen3-8B"])
def test_a_dense_models_config_json_is_refused(name):
    with pytest.raises(MoesimError, match="not a mixture of experts"):
        get_model(str(CONFIGS / f"{name}.json"))
