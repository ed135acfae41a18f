"""Behaviour of the engine and the policies: invariants, limits, bad input."""

import json
from typing import NamedTuple

import numpy as np
import pytest
from numba import njit
from hypothesis import example, given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.policies import POLICIES, get_policy
from moesim.policies.base import (HEAD, PREV, TAIL, list_first_unmarked, list_head, list_next, list_of, list_push_head,
                                  list_remove, list_rename, list_size, list_tail, list_to_head, make_lists)
from moesim import hitrate
from moesim.tracegen.synth import Locality, synth_trace

ONLINE = [p for p in POLICIES if p not in ("belady", "ml-ffn", "static")]


def small(seed, layers=3, experts=8, top_k=2, sequences=2, tokens=40):
    return synth_trace(layers=layers, experts=experts, top_k=top_k, sequences=sequences, tokens=tokens,
                       seed=seed, locality=Locality(reuse=0.4))


def _most_hits(steps, capacity: int, bypass: bool) -> int:
    """The most hits any policy can have on one layer's steps under step semantics (a step's set arrives at once,
    its residents are never evicted for it), by a search of every choice of what to load and evict: with
    ``bypass``, a miss may also be served without a slot."""
    import itertools
    from functools import lru_cache

    @lru_cache(None)
    def best(i: int, cache: frozenset) -> int:
        if i == len(steps):
            return 0
        request = frozenset(steps[i])
        hits, missed, out = len(request & cache), sorted(request - cache), -1
        for k in range(0 if bypass else len(missed), len(missed) + 1):
            for loaded in itertools.combinations(missed, k):
                after = cache | frozenset(loaded)
                for evicted in itertools.combinations(sorted(cache - request), max(0, len(after) - capacity)):
                    out = max(out, hits + best(i + 1, after - frozenset(evicted)))
        return out

    return best(0, frozenset())


@pytest.mark.parametrize("seed", [729, 3, 41])
def test_belady_has_the_most_hits_a_search_finds_and_a_bypassing_policy_no_more_than_that(seed):
    trace = small(seed)
    for capacity in (3, 5, 7):
        belady, gamma = (hitrate(trace, p, capacity, "per-layer", "step").per_layer_hits for p in ("belady", "gamma"))
        for layer in range(trace.meta.num_layers):
            steps = [tuple(int(e) for e in row) for row in trace.experts[:, layer]]
            assert belady[layer] == _most_hits(steps, capacity, bypass=False), (capacity, layer)
            assert gamma[layer] <= _most_hits(steps, capacity, bypass=True), (capacity, layer)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), c=st.integers(2, 7), semantics=st.sampled_from(["step", "sequential"]),
       scope=st.sampled_from(["per-layer", "global"]))
@example(seed=729, c=7, semantics="step", scope="per-layer")  # γ bypasses one miss and beats Belady by a hit
def test_belady_is_best_and_counts_are_sane(seed, c, semantics, scope):
    """Belady (every miss cached) has the fewest misses of every policy that caches every miss too; one that may
    serve a miss without a slot (``bypasses``: the γ-cache) can have fewer: at seed 729 it has 152 hits in layer 2
    where the optimum without bypasses is 151, and with them 152 (the test above searches every choice)."""
    trace = small(seed)
    cap = c if scope == "per-layer" else c * 3
    best = hitrate(trace, "belady", cap, scope, semantics)
    for policy in ONLINE:
        r = hitrate(trace, policy, cap, scope, semantics)
        assert 0 <= r.hits <= r.accesses == trace.accesses
        if not get_policy(policy).bypasses:
            assert best.misses <= r.misses, policy


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), semantics=st.sampled_from(["step", "sequential"]))
def test_room_for_everything_gives_only_cold_misses(seed, semantics):
    trace = small(seed)
    cold = sum(len(np.unique(trace.experts[:, layer, :])) for layer in range(3))
    for policy in ONLINE + ["belady", "static"]:
        assert hitrate(trace, policy, 8, "per-layer", semantics).misses == cold, policy


def test_step_semantics_never_evicts_a_member_of_the_request_set():
    # capacity k: every step's k experts must all be resident afterwards, so the cache after a step
    # is exactly its set, whatever the policy that admits every miss (gamma's Top-C may keep older
    # experts instead); evicting a member would lose hits below
    experts = np.array([[[0, 1]], [[0, 1]], [[2, 0]], [[2, 0]], [[1, 3]], [[1, 3]]], np.int16)
    trace = small(0, layers=1, experts=4, top_k=2, sequences=1, tokens=6)
    trace.experts[:] = experts
    for policy in [p for p in ONLINE if p != "gamma"] + ["belady"]:
        r = hitrate(trace, policy, 2, "per-layer", "step")
        # rows 1, 3 and 5 repeat their predecessor (2 hits each), row 2 keeps expert 0, row 4 nothing
        assert r.hits == 2 + 1 + 2 + 0 + 2, policy


def test_gamma_zero_is_lru(mixtral):
    """Remark C.2's recency limit: at γ = 0 only the current token counts and ties go to the later
    served, which is LRU's order (γ → 0⁺ differs only in how experts of one token are ordered)."""
    for policy in ("gamma", "gamma-admit"):
        for semantics in ("step", "sequential"):
            for c in (2, 4, 6):
                assert hitrate(mixtral, policy, c, semantics=semantics, gamma=0.0).hits == \
                    hitrate(mixtral, "lru", c, semantics=semantics).hits


def perfect_lfu_misses(experts, c, admit_all):
    """Remark C.2's frequency limit, γ = 1, sequential semantics, one layer: counts of every request
    so far, ties to the later served. Top-C (Definition C.1): a miss is kept only if it outranks the
    lowest resident; ``admit_all`` (gamma-admit): every miss is kept and the lowest resident goes."""
    count, seen, cache, misses = {}, {}, [], 0
    for clock, e in enumerate(experts.reshape(-1).tolist()):
        count[e] = count.get(e, 0) + 1
        seen[e] = clock
        if e in cache:
            continue
        misses += 1
        if len(cache) < c:
            cache.append(e)
            continue
        lowest = min(cache, key=lambda o: (count[o], seen[o]))
        if admit_all or (count[e], seen[e]) > (count[lowest], seen[lowest]):
            cache[cache.index(lowest)] = e
    return misses


def test_gamma_one_is_perfect_lfu():
    trace = small(3, layers=1, experts=8, top_k=2, sequences=1, tokens=300)
    for c in (2, 3, 5):
        for policy in ("gamma", "gamma-admit"):
            assert hitrate(trace, policy, c, semantics="sequential", gamma=1.0).misses == \
                perfect_lfu_misses(trace.experts[:, 0, :], c, policy == "gamma-admit"), (policy, c)


def test_gamma_keeps_the_top_c_and_bypasses_the_rest():
    """Definition C.1 by hand: γ = 1, C = 2, one layer, top-1, tokens a a b b c c. After b b the
    counts are a = b = 2; c's first request (count 1) does not reach the Top-2: served, not kept.
    Its second (count 2, served last) outranks a (2, served before b): a goes. gamma-admit keeps c
    at once, in a's place."""
    trace = small(0, layers=1, experts=4, top_k=1, sequences=1, tokens=6)
    trace.experts[:, 0, 0] = [0, 0, 1, 1, 2, 2]
    top_c = hitrate(trace, "gamma", 2, semantics="sequential", gamma=1.0, log_evictions=10)
    assert top_c.misses == 4 and top_c.evictions.tolist() == [[5, 0]]
    admit = hitrate(trace, "gamma-admit", 2, semantics="sequential", gamma=1.0, log_evictions=10)
    assert admit.misses == 3 and admit.evictions.tolist() == [[4, 0]]


def test_the_gamma_admission_decides_whether_a_miss_is_kept_and_the_policy_which_expert_goes():
    """By hand, γ = 1, C = 2, one layer, top-1. Tokens a a b b c c: LRU keeps c at once in a's place; behind the γ
    admission c's first request (count 1 under a = b = 2) is served and not kept, its second (2, served last) is, in
    LRU's victim a's place. Tokens a a a b c c: c (1, served after b's 1) is admitted at once; LRU evicts a (used
    longest ago), the γ-cache b (the lowest count)."""
    trace = small(0, layers=1, experts=4, top_k=1, sequences=1, tokens=6)
    for tokens, policy, admission, misses, evictions in (
            ([0, 0, 1, 1, 2, 2], "lru", "all", 3, [[4, 0]]), ([0, 0, 1, 1, 2, 2], "lru", "gamma", 4, [[5, 0]]),
            ([0, 0, 0, 1, 2, 2], "lru", "gamma", 3, [[4, 0]]), ([0, 0, 0, 1, 2, 2], "gamma", "all", 3, [[4, 1]])):
        trace.experts[:, 0, 0] = tokens
        decay = {"gamma": 1.0} if "gamma" in (policy, admission) else {}
        r = hitrate(trace, policy, 2, semantics="sequential", admission=admission, log_evictions=10, **decay)
        assert (r.misses, r.evictions.tolist()) == (misses, evictions), (tokens, policy, admission)


def test_at_gamma_zero_the_admission_keeps_every_miss(mixtral):
    """At γ = 0 a miss's count (1) outranks every resident outside the step (0) and ties those inside it served
    earlier, and a step's misses always have room: behind the admission each policy is itself, eviction by eviction."""
    for policy in ("lru", "arc", "fifo"):
        for semantics in ("step", "sequential"):
            alone = hitrate(mixtral, policy, 3, semantics=semantics, log_evictions=10 ** 5)
            gated = hitrate(mixtral, policy, 3, semantics=semantics, admission="gamma", gamma=0.0, log_evictions=10 ** 5)
            assert gated.per_layer_hits == alone.per_layer_hits and gated.policy == f"{policy}+gamma"
            assert gated.evictions.tolist() == alone.evictions.tolist()


def test_an_admission_goes_only_in_front_of_a_policy_that_keeps_every_miss(mixtral):
    for policy in ("gamma", "static"):
        with pytest.raises(MoesimError, match=f"admission gamma .*{policy} decides what it keeps itself"):
            hitrate(mixtral, policy, 4, admission="gamma")
    with pytest.raises(MoesimError, match="admission must be one of all, gamma"):
        hitrate(mixtral, "lru", 4, admission="tinylfu")


@njit
def _never(st, part, obj, t):
    st.refused[0] += 1
    return False


class _Refused(NamedTuple):
    refused: np.ndarray  # int64 [1]: the misses it refused


def test_an_admission_written_as_the_recipe_says_runs_in_front_of_any_policy(cli, mixtral, monkeypatch):
    """docs/architecture.md's recipe for an admission, followed with a toy written here: one that keeps nothing,
    registered under its name; the API and ``sim hitrate`` put it in front of LRU, where every access misses (the
    discrete-event engine runs compositions as tests/test_reference.py checks, each a loop of its own to compile)."""
    import sys
    import types

    from moesim.policies import admission
    from moesim.tracegen.trace import bundled_trace_path

    toy = types.ModuleType("moesim.policies.never")
    toy.ADMISSION = admission.AdmissionSpec("never", lambda ctx: _Refused(np.zeros(1, np.int64)), {"on_miss": _never})
    monkeypatch.setitem(sys.modules, "moesim.policies.never", toy)
    monkeypatch.setattr(admission, "ADMISSIONS", (*admission.ADMISSIONS, "never"))
    r = hitrate(mixtral, "lru", 4, admission="never")
    assert (r.policy, r.hits, r.misses) == ("lru+never", 0, mixtral.accesses)
    code, out, err = cli("sim", "hitrate", bundled_trace_path(), "--policy", "lru,fifo", "--admission", "never",
                         "--capacity", "4", "--json")
    assert code == 0, err
    assert [(row["policy"], row["hits"]) for row in json.loads(out)["results"]] == [("lru+never", 0), ("fifo+never", 0)]


def test_static_pins_the_most_popular(mixtral):
    r = hitrate(mixtral, "static", 4)
    counts = [np.bincount(mixtral.experts[:, l, :].ravel(), minlength=8) for l in range(32)]
    top4 = sum(np.sort(c)[-4:].sum() for c in counts)
    # every access to a pinned expert hits except its first one; the rest miss (free slots at the
    # start may briefly hold an unpinned expert, which can only add hits)
    assert r.hits >= top4 - 4 * 32


def test_seeded_policies_repeat_and_seeds_differ(mixtral):
    a = hitrate(mixtral, "random", 4, seed=1).hits
    assert a == hitrate(mixtral, "random", 4, seed=1).hits
    assert a != hitrate(mixtral, "random", 4, seed=2).hits
    assert hitrate(mixtral, "lecar", 4, seed=5).hits == hitrate(mixtral, "lecar", 4, seed=5).hits


def test_generator_is_splitmix64_with_a_stream_per_partition():
    """SplitMix64's published first output for seed 0 (0xE220A8397B1DCDAF), and partition p's n-th draw
    is the seed's stream's (p * 2^40 + n)-th."""
    from moesim.policies.base import STREAM, make_rng, rng_uniform

    rng = make_rng(0, 3)
    assert rng_uniform(rng, 0) == (0xE220A8397B1DCDAF >> 11) / 2 ** 53
    single = make_rng(7)
    rng = make_rng(7, 3)
    rng[0, 1] = (int(rng[0, 0]) + 2 * STREAM * 0x9E3779B97F4A7C15) % 2 ** 64  # stream 0, jumped to draw 2^41
    assert [rng_uniform(rng, 0) for _ in range(3)] == [rng_uniform(rng, 2) for _ in range(3)]
    assert rng_uniform(single, 0) == rng_uniform(make_rng(7, 2), 0)


def test_lecar_layers_draw_apart(mixtral):
    """Under per-layer scope each layer's cache has its own generator: changing one layer's routing
    leaves every other layer's hits as they were (with one shared generator the draws shifted)."""
    import dataclasses

    experts = mixtral.experts.copy()
    experts[:, 1] = experts[::-1, 1]  # layer 1 served in reverse order
    moved = dataclasses.replace(mixtral, experts=experts)
    before, after = hitrate(mixtral, "lecar", 4).per_layer_hits, hitrate(moved, "lecar", 4).per_layer_hits
    assert before[:1] + before[2:] == after[:1] + after[2:] and before[1] != after[1]


def test_reset_per_sequence_counts_cold_misses_again(mixtral):
    kept = hitrate(mixtral, "lru", 8, "per-layer", "step")
    reset = hitrate(mixtral, "lru", 8, "per-layer", "step", reset=True)
    assert kept.misses == 8 * 32 - sum(  # all 8 experts per layer fit: only first-ever uses miss
        8 - len(np.unique(mixtral.experts[:, l, :])) for l in range(32))
    assert reset.misses > kept.misses


def test_usage_errors(mixtral):
    with pytest.raises(MoesimError, match="below top_k"):
        hitrate(mixtral, "lru", 1)
    with pytest.raises(MoesimError, match="policy must be one of"):
        hitrate(mixtral, "nope", 4)
    with pytest.raises(MoesimError, match="needs a model"):
        hitrate(mixtral, "ml-ffn", 4)
    with pytest.raises(MoesimError, match="gamma"):
        hitrate(mixtral, "gamma", 4, gamma=1.5)
    # one slot under sequential semantics: an access hits exactly when its layer's access before it asked for
    # the same expert (the trace's accesses in order: rows, then ranks; the cache carries over sequences)
    by_layer = mixtral.experts.transpose(1, 0, 2).reshape(mixtral.meta.num_layers, -1)
    assert hitrate(mixtral, "lru", 1, semantics="sequential").hits == int((by_layer[:, 1:] == by_layer[:, :-1]).sum())


def _forward(x, w1, b1, w2, b2, w3, b3):
    silu = lambda h: h / (1.0 + np.exp(-h))
    return silu(silu(x @ w1 + b1) @ w2 + b2) @ w3 + b3


@pytest.mark.parametrize("models", [1, 3])
def test_ml_ffn_batched_predictions_are_the_network_on_each_step(models):
    """The batched pass equals the FFN run on each (step, layer) alone, and a reset per sequence
    starts the features afresh: a sequence's predictions equal those of that sequence alone."""
    from moesim.policies.ml_ffn import fill_features, new_history, predictions

    trace = small(3, sequences=3, tokens=30)
    e, hidden, layers = 8, 16, 3
    rng = np.random.default_rng(0)
    shapes = [(2 * e, hidden), (hidden,), (hidden, hidden), (hidden,), (hidden, e), (e,)]
    weights = tuple(rng.standard_normal((models, *s)).astype(np.float32) for s in shapes)
    offsets = trace.seq_offsets.astype(np.int64)
    got = predictions(trace.experts, offsets, e, True, weights)
    for s in range(3):
        alone = trace.select([s])
        rows = alone.experts.shape[0]
        x = np.empty((layers, rows, 2 * e), np.float32)
        fill_features(alone.experts, np.zeros(rows, np.bool_), e, 0, rows, *new_history(layers, e), x)
        for layer in range(layers):
            m = 0 if models == 1 else layer
            want = _forward(x[layer].astype(np.float64), *(w[m].astype(np.float64) for w in weights))
            np.testing.assert_allclose(got[offsets[s]:offsets[s + 1], layer], want, rtol=1e-4, atol=1e-4)
    assert np.array_equal(predictions(trace.experts, offsets, e, False, weights, negate=True),
                          -predictions(trace.experts, offsets, e, False, weights))


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "ml-ffn"])
def test_policy_state_is_named(policy, mixtral):
    """A policy's state, and its lanes' state, is a named tuple: fields read by name, never by position."""
    from moesim.policies import get_policy
    from moesim.policies.base import Context
    from moesim.sim.config import run_params

    spec = get_policy(policy)
    slots = np.full(mixtral.meta.num_layers, 4, np.int64)
    ctx = Context(mixtral.experts, mixtral.seq_offsets.astype(np.int64), mixtral.meta.num_experts, slots, True, True,
                  False, run_params(spec, {}))
    state = spec.make_state(ctx)
    assert isinstance(state, tuple) and type(state)._fields, policy
    for path in spec.fast_paths:
        if path.kind == "lanes":
            lanes = path.make(ctx, 8)
            assert type(lanes)._fields and all(isinstance(getattr(lanes, f), (np.ndarray, np.integer))
                                               for f in type(lanes)._fields), policy


def test_static_pins_each_layers_top_c_of_the_request_rows_by_count_ties_to_the_lower_id():
    from types import SimpleNamespace
    from moesim.policies import static

    rng = np.random.default_rng(3)
    rows = rng.integers(-1, 6, (40, 3, 4)).astype(np.int16)  # request rows: -1 is no expert
    rows[:, 2, :] = [0, 5, 5, -1]  # layer 2: 5 twice as often as 0, the rest never
    slots = np.array([2, 3, 3])
    ctx = SimpleNamespace(params={"pin_trace": None}, experts=rows, num_layers=3, num_experts=6, num_objects=18,
                          per_layer=True, slots=slots)
    pinned = static.make_state(ctx).pinned.reshape(3, 6)
    for layer in range(3):
        count = {e: int((rows[:, layer] == e).sum()) for e in range(6)}
        best = sorted(range(6), key=lambda e: (-count[e], e))[:slots[layer]]
        assert sorted(np.flatnonzero(pinned[layer])) == sorted(best), layer
    assert pinned[2].tolist() == [1, 1, 0, 0, 0, 1]  # 5, 0, then the lowest id of those never run
    ctx.per_layer, ctx.slots = False, np.array([4])
    pool = static.make_state(ctx).pinned
    count = {(l, e): int((rows[:, l] == e).sum()) for l in range(3) for e in range(6)}
    best = sorted(count, key=lambda le: (-count[le], le[0] * 6 + le[1]))[:4]
    assert sorted(np.flatnonzero(pool)) == sorted(l * 6 + e for l, e in best)


def _history_reference(experts, seq_offsets, num_experts):
    """The history prefetcher's predictions from its docstring: conditional probabilities of j at layer l given i at
    layer l-1 of the token (cross) and given i at layer l of the previous token (prev), the score of j the sum
    over the token's experts at l-1 and the previous token's at l, the k best above 0, ties to the lower id."""
    n_rows, n_layers, k = experts.shape
    cross = np.zeros((n_layers, num_experts, num_experts))
    prev = np.zeros((n_layers, num_experts, num_experts))
    for s in range(len(seq_offsets) - 1):
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                for i in experts[row, layer]:
                    if layer + 1 < n_layers:
                        for j in experts[row, layer + 1]:
                            cross[layer + 1, i, j] += 1
                    if row + 1 < seq_offsets[s + 1]:
                        for j in experts[row + 1, layer]:
                            prev[layer, i, j] += 1
    for table in (cross, prev):
        totals = table.sum(axis=2, keepdims=True)
        np.divide(table, totals, out=table, where=totals > 0)
    out = np.full(experts.shape, -1, np.int16)
    for s in range(len(seq_offsets) - 1):
        for row in range(seq_offsets[s], seq_offsets[s + 1]):
            for layer in range(n_layers):
                score = [0.0] * num_experts
                for e in range(num_experts):
                    if layer > 0:
                        for i in experts[row, layer - 1]:
                            score[e] += cross[layer, i, e]
                    if row > seq_offsets[s]:
                        for i in experts[row - 1, layer]:
                            score[e] += prev[layer, i, e]
                best = [e for e in sorted(range(num_experts), key=lambda e: (-score[e], e)) if score[e] > 0][:k]
                out[row, layer, :len(best)] = best
    return out


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), experts=st.integers(2, 12), top_k=st.integers(1, 3))
def test_history_predicts_as_its_definition_says(seed, experts, top_k):
    from moesim.policies.prefetch import history

    trace = small(seed, layers=3, experts=experts, top_k=min(top_k, experts), sequences=3, tokens=12)
    want = _history_reference(trace.experts, trace.seq_offsets, experts)
    assert np.array_equal(history.predict(trace, {"train_trace": None}), want)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(0, 3), st.integers(0, 11)),
                max_size=60))
@example([(0, 1, 2, 1), (0, 1, 2, 2), (0, 1, 2, 3), (3, 1, 2, 2), (3, 1, 2, 3), (3, 1, 2, 1)])  # middle, head, tail
def test_linked_lists_keep_the_order_a_python_list_keeps(ops):
    """Pushes, removals, moves to the head and renames (a node not on a list taking one's place) on several
    lists of two partitions, against Python lists; walks that skip the request set, over objects or slots."""
    lists, ref, where = make_lists(12, 2, 4), {(p, li): [] for p in range(2) for li in range(4)}, {}
    for op, part, li, obj in ops:
        if op == 0 and obj not in where:
            list_push_head(lists, part, li, obj)
            ref[part, li].insert(0, obj)
            where[obj] = (part, li)
        elif op == 1 and obj in where:
            list_remove(lists, where[obj][0], obj)
            ref[where.pop(obj)].remove(obj)
        elif op == 2 and obj in where:
            list_to_head(lists, *where[obj], obj)
            ref[where[obj]].remove(obj)
            ref[where[obj]].insert(0, obj)
        elif op == 3 and obj in where and len(where) < 12:
            new = min(n for n in range(12) if n not in where)
            list_rename(lists, where[obj][0], obj, new)
            objs = ref[where[obj]]
            objs[objs.index(obj)] = new
            where[new] = where.pop(obj)
            assert list_of(lists, obj) == -1
    for (part, li), objs in ref.items():
        walked, obj = [], list_head(lists, part, li)
        while obj >= 0:
            assert list_of(lists, obj) == li
            walked.append(obj)
            obj = list_next(lists, obj)
        assert walked == objs and list_size(lists, part, li) == len(objs)
        assert list_tail(lists, part, li) == (objs[-1] if objs else -1)
        back, obj = [], list_tail(lists, part, li)
        while obj >= 0 and len(back) <= len(objs):  # the prev links, read from the table (node: PREV, NEXT, WHICH)
            back.append(obj)
            obj = lists.node[obj * 3 + PREV]
        assert back == objs[::-1]
        if len(objs) > 2:  # the middle one alone not in the request set: walks from either end find it
            mark = np.ones(12, np.int64)
            mark[objs[1]] = 0
            assert list_first_unmarked(lists, part, li, TAIL, mark, 1) == objs[1]
            assert list_first_unmarked(lists, part, li, HEAD, mark, 1) == objs[1]
            obj_of = (np.arange(12) + 5) % 12  # the nodes as slots, holding other objects
            mark[:], mark[obj_of[objs[1]]] = 1, 0
            assert list_first_unmarked(lists, part, li, TAIL, mark, 1, obj_of) == objs[1]
            assert list_first_unmarked(lists, part, li, HEAD, mark, 1, obj_of) == objs[1]
    with pytest.raises(ValueError, match="at most 4 lists"):
        make_lists(4, 1, 5)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 12), layers=st.integers(1, 4), width=st.integers(1, 4),
       experts=st.integers(1, 6), padded=st.booleans(), strided=st.booleans())
def test_next_uses_link_each_access_to_the_same_objects_next(seed, rows, layers, width, experts, padded, strided):
    """Belady's next uses against their definition: for each position (row * L + layer) * W + j, the
    next position of the same (layer, expert), NEVER if none or at a -1 entry; the first access of
    each object. A strided (non-contiguous) trace gives the same."""
    from moesim.policies.belady import NEVER, link_next, next_uses

    rng = np.random.default_rng(seed)
    full = rng.integers(-1 if padded else 0, experts, (rows, layers, 2 * width)).astype(np.int16)
    trace = full[:, :, ::2] if strided else np.ascontiguousarray(full[:, :, :width])
    flat = [(layer, int(trace[r, layer, j])) for r in range(rows) for layer in range(layers) for j in range(width)]
    want = [next((q for q in range(p + 1, len(flat)) if flat[q] == flat[p]), NEVER) if flat[p][1] >= 0 else NEVER
            for p in range(len(flat))]
    first = [next((p for p in range(len(flat)) if flat[p] == (layer, e)), NEVER)
             for layer in range(layers) for e in range(experts)]
    got, got_first = next_uses(trace, experts)
    assert got.tolist() == want and got_first.tolist() == first
    small, small_first = np.empty(trace.size, np.int32), np.full(layers * experts, trace.size, np.int32)
    link_next(trace, experts, small, small_first)  # the lanes' int32 form, "never" the trace's length
    assert small.tolist() == [min(w, trace.size) for w in want]
    assert small_first.tolist() == [min(f, trace.size) for f in first]
