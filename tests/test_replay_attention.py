"""The replay's attention (``ComputeStream.attend``) against attention written from its definition: every query
head over its KV head, each sequence over keys of its own, layers reading distinct stretches of the pool."""

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from moesim.replay.compute import HEAD, POOL_BYTES, ComputeStream, attention_kernels, heads, pool_keys  # noqa: E402
from moesim.tracegen.models import get_model  # noqa: E402


def test_heads_of_the_presets():
    assert heads(get_model("mixtral-8x7b").q_dim, get_model("mixtral-8x7b").kv_dim) == (32, 8, 128)
    assert heads(2048, 2048) == (16, 16, 128)      # OLMoE: no grouping
    assert heads(4096, 512) == (32, 4, 128)        # Qwen3-30B-A3B: 8 query heads a KV head
    assert heads(3072, 576) == (5, 1, 576)         # DeepSeek-V2-Lite's latent: one KV head, 5 of its width
    assert heads(64, 32) == (2, 1, 32)             # narrower than a head: one KV head of the KV width


def test_pool_keys():
    assert pool_keys(0, 4, 256, 1 << 40) == 0
    assert pool_keys(100, 4, 256, 1 << 40) == 400                       # every layer's row fits: a cache each
    assert pool_keys(1 << 20, 4, 256, 1 << 40) == 1 << 20               # one row is the floor
    assert pool_keys(1000, 10 ** 6, 256, 1 << 40) == POOL_BYTES // 512  # else the pool's bytes, K and V
    assert pool_keys(1 << 20, 4, 256, 1 << 20) == (1 << 20) // (8 * 2 * 256)  # at most an eighth of memory


def reference(q, k_pool, v_pool, seqs, keys, at, step, q_heads, kv_heads, hd):
    """softmax(q_h K^T / sqrt(hd)) V per sequence s and query head h, K and V the keys of s's KV head; sequence s
    holds query rows s·ceil(T/S) onwards; query widths past q_dim are zero, output widths past it dropped."""
    rows, group, width = -(-q.shape[0] // seqs), q_heads // kv_heads, q.shape[1]
    padded = torch.zeros(q.shape[0], max(width, q_heads * hd), dtype=torch.float64)
    padded[:, :width] = q.double()
    out = torch.zeros_like(padded)
    for s in range(seqs):
        lo, mine = at + s * step, slice(s * rows, (s + 1) * rows)
        for h in range(q_heads):
            k, v = k_pool[h // group, lo:lo + keys].double(), v_pool[h // group, lo:lo + keys].double()
            qh = padded[mine, h * hd:(h + 1) * hd]
            out[mine, h * hd:(h + 1) * hd] = torch.softmax(qh @ k.T / math.sqrt(hd), -1) @ v
    return out[:, :width]


@pytest.mark.parametrize("seqs,tokens,keys", [(4, 4, 6), (1, 6, 5), (2, 6, 3), (2, 5, 3)])  # 5 rows: 3 + 2
def test_attention_from_its_definition(seqs, tokens, keys):
    model = dataclasses.replace(get_model("mixtral-8x7b"), d_model=64, d_expert=32, q_dim=4 * HEAD, kv_dim=2 * HEAD,
                                num_layers=2, dense_layers=0, vocab=16)
    work = ComputeStream(model, seed=3, row_keys=seqs * keys)
    assert (work.q_heads, work.kv_heads, work.head) == (4, 2, HEAD)
    assert work.pool[0].shape == (2, 2 * seqs * keys, HEAD)  # both layers' rows: a cache each
    work.row(0, tokens, tokens * keys, seqs)
    q = torch.randn(tokens, model.q_dim, generator=torch.Generator().manual_seed(1))
    got = [work.attend(q) for _ in range(3)]
    for layer, at in enumerate((0, seqs * keys, 0)):  # the second layer reads the next stretch, the third wraps
        want = reference(q, *work.pool, seqs, keys, at, keys, 4, 2, HEAD)
        assert torch.allclose(got[layer].double(), want, atol=1e-5), layer


def test_sequences_overlap_in_a_short_pool():
    model = dataclasses.replace(get_model("olmoe-1b-7b"), d_model=64, d_expert=32, q_dim=HEAD, kv_dim=HEAD,
                                num_layers=1, dense_layers=0, vocab=16)
    work = ComputeStream(model, row_keys=8)
    work.row(0, 4, 4 * 5, 4)   # 4 sequences of 5 keys, 20 > the pool's 8
    q = torch.randn(4, HEAD, generator=torch.Generator().manual_seed(2))
    want = reference(q, *work.pool, 4, 5, 0, 1, 1, 1, HEAD)  # sequence s starts at key s: the 8 keys hold all four
    assert torch.allclose(work.attend(q).double(), want, atol=1e-5)


def test_latent_attention_is_one_head_of_its_width():
    """DeepSeek-V2-Lite's widths (q 3072, latent 576): 5 query heads of 576 over one KV head, the last 192 query
    columns left out of the scores and given back unchanged."""
    model = dataclasses.replace(get_model("deepseek-v2-lite"), d_model=64, d_expert=32, num_layers=1, dense_layers=0,
                                vocab=16)
    work = ComputeStream(model, row_keys=8)
    assert (work.q_heads, work.kv_heads, work.head) == (5, 1, 576)
    work.row(0, 2, 2 * 4, 2)
    q = torch.randn(2, 3072, generator=torch.Generator().manual_seed(3))
    got = work.attend(q).double()
    assert got.shape == (2, 3072) and not got[:, 2880:].any()
    assert torch.allclose(got, reference(q, *work.pool, 2, 4, 0, 4, 5, 1, 576), atol=1e-5)


def flags():
    """Whether each of the four attention kernels moesim chooses among may run (cuDNN, flash, efficient, math)."""
    cuda = torch.backends.cuda
    return cuda.cudnn_sdp_enabled(), cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled(), cuda.math_sdp_enabled()


def one_layer_stream(device="cpu"):
    model = dataclasses.replace(get_model("olmoe-1b-7b"), d_model=64, d_expert=32, q_dim=HEAD, kv_dim=HEAD,
                                num_layers=1, dense_layers=0, vocab=16)
    work = ComputeStream(model, device=device, row_keys=8)
    work.row(0, 1, 4, 1)
    return work


@pytest.fixture
def seen(monkeypatch):
    """The kernels allowed at each call of attention."""
    calls, real = [], torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: (calls.append(flags()), real(*a, **k))[1])
    return calls


def test_a_gpu_stream_attends_without_cudnns_kernel(seen):
    """cuDNN's attention builds a plan per new key count on the host (35-70 ms each on an H200): a stream holding a
    GPU's kernels calls attention with every other one allowed, and leaves the settings as it found them; a CPU
    stream changes none."""
    before = flags()
    assert before == (True, True, True, True)
    work = one_layer_stream()
    q = torch.randn(1, HEAD, generator=torch.Generator().manual_seed(4))
    want = work.attend(q)
    work.kernels, work.at = attention_kernels(torch, "cuda"), 0  # what a stream on "cuda" holds; the same keys
    got = work.attend(q)
    assert seen == [before, (False, True, True, True)]
    assert flags() == before and torch.equal(got, want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_stream_on_a_gpu_holds_the_gpus_kernels(seen):
    one_layer_stream("cuda").attend(torch.randn(1, HEAD, device="cuda", dtype=torch.bfloat16))
    assert seen == [(False, True, True, True)]
