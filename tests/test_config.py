"""The one configuration object: validated once, one-line errors, flat names, TOML and hashing."""

from __future__ import annotations

import numpy as np
import pytest

from moesim import CacheConfig, Config, MoesimError
from moesim.sim.config import CACHE_PARAMS, PREFETCH_PARAMS, SETTINGS, config_id


@pytest.mark.parametrize("settings, message", [
    (dict(polcy="lru"), "unknown setting 'polcy'"),
    (dict(policy="lru", gamma=0.5), "policy lru takes no parameter 'gamma'"),
    (dict(policy="gamma", gamma=1.5), "gamma must be in [0.0, 1.0]"),
    (dict(policy="gamma", gamma=float("nan")), "gamma must be a finite number"),
    (dict(policy="random", seed=1.5), "seed must be a whole number"),
    # numba's generators wrapped a seed past 2^64 to another's, and -1 to 2^64 - 1's; numpy's refuse both
    (dict(policy="random", seed=-1), "seed must be at least 0, got -1"),
    (dict(policy="lecar", seed=2 ** 64), "seed must be at most 9,223,372,036,854,775,807, got 18,446,744,073,709,551,616"),
    # past 2^31 - 1 the arrays' int64 sums overflow: a traceback at 2^70, wrong times near 2^63
    (dict(capacity=2 ** 70), "capacity must be at most 2,147,483,647, got 1,180,591,620,717,411,303,424"),
    (dict(capacity=(4, 2 ** 31)), "capacity per layer: each must be at most 2,147,483,647, got 2,147,483,648"),
    (dict(context=2 ** 63 - 8), "context must be at most 2,147,483,647"),
    (dict(max_batch_tokens=10 ** 20), "max_batch_tokens must be at most 2,147,483,647"),
    (dict(strategy="cpu-experts", cpu_layers=10 ** 20), "cpu_layers must be at most 2,147,483,647"),
    (dict(arrival_seed=2 ** 63), "arrival_seed must be at most 9,223,372,036,854,775,807"),
    (dict(policy="nope"), "[cache] policy must be one of belady, lru, lfu, fifo, lifo, random, arc, lecar, gamma, "
                          "gamma-admit, ml-ffn, static, got 'nope'"),
    (dict(capacity=-1), "capacity must be at least 0"),
    (dict(capacity=4.0), "capacity must be auto or a whole number from 0 to 2,147,483,647, got 4.0"),
    (dict(capacity=True), "capacity must be auto or a whole number from 0 to 2,147,483,647, got True"),
    (dict(batch=0), "batch must be at least 1"),
    (dict(context=-5), "context must be at least 0"),
    (dict(dram_capacity=-1), "dram_capacity must be at least 0"),
    (dict(scope="everywhere"), "[cache] scope must be one of per-layer, global, got 'everywhere'"),
    (dict(kernel="grouped"), "[execution] kernel must be one of fused, per-expert, got 'grouped'"),
    (dict(mode="commit"), "mode commit runs next-layer predictions; prefetcher 'none'"),
    (dict(prefetch="popular", mode="commit"), "prefetcher 'popular' makes none"),
    (dict(prefetch="oracle", train_trace="t.parquet"), "prefetcher oracle takes no parameter 'train_trace'"),
    (dict(hardware="rtx9090"), "[hardware] machine must be a preset (h100, "),
    (dict(link="pcie9"), "[hardware] link must be one of pcie3, pcie4, pcie5, "),
    (dict(dtype="int3"), "[model] dtype must be one of fp32, bf16, "),
    (dict(reset="yes"), "reset must be true or false"),
])
def test_bad_settings_are_one_line_errors(settings, message):
    with pytest.raises(MoesimError) as err:
        Config.build(**settings)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_setting_has_one_flat_name_and_round_trips():
    config = Config.build(policy="gamma", gamma=0.8, capacity=np.int64(6), scope="global", prefetch="history",
                          train_trace="train.parquet", mode="commit", kernel="per-expert", batch=2, context=128,
                          hardware="h100", link="pcie4", ssd="pcie5-nvme", dram_capacity=32, model="mixtral-8x7b",
                          dtype="int4", reset=True)
    flat = config.flat()
    assert set(flat) == set(SETTINGS) | {"gamma", "train_trace"}
    assert type(flat["capacity"]) is int and flat["capacity"] == 6
    assert Config.build(**flat) == config
    assert config.cache.params == {"gamma": 0.8} and config.prefetch.params == {"train_trace": "train.parquet"}
    assert set(CACHE_PARAMS) == {"gamma", "seed", "ml_model", "pin_trace"} and PREFETCH_PARAMS == ("train_trace", "prefetch_model")


def test_a_new_policy_drops_the_old_ones_parameters():
    gamma = Config.build(policy="gamma", gamma=0.5)
    assert gamma.replace(policy="lru").cache.params == {}
    assert gamma.replace(capacity=8).cache.params == {"gamma": 0.5}
    assert gamma.replace(policy="gamma-admit", gamma=0.7).cache.params == {"gamma": 0.7}
    # an admission that stays keeps its own parameter across a new policy; it goes with the admission
    gated = Config.build(policy="lru", admission="gamma", gamma=0.8)
    assert gated.replace(policy="arc").cache.params == {"gamma": 0.8}
    assert gated.replace(admission="all").cache.params == {} and gated.replace(policy="belady", admission="all") == \
        Config.build(policy="belady")
    assert Config.build(prefetch="oracle", admission="gamma").replace(admission="all").prefetch.prefetcher == "oracle"
    seeded = Config.build(policy="random", seed=7)  # a new admission keeps the policy's own parameters
    assert seeded.replace(admission="gamma").cache.params == {"seed": 7}
    assert seeded.replace(admission="gamma", gamma=0.5).replace(admission="all").cache.params == {"seed": 7}


def test_toml_round_trip_and_its_errors_name_the_file(tmp_path):
    config = Config.build(policy="static", pin_trace="pop.parquet", capacity=5, prefetch="oracle", batch=3,
                          hardware="rtx5070ti", ssd="pcie5-nvme", dram_capacity=0)
    path = tmp_path / "run.toml"
    config.to_toml(path)
    assert Config.from_toml(path) == config
    listed = Config.build(capacity=[2, 3, 4], split="best", tensor_split="3,1")  # a capacity per layer, -ts shares
    listed.to_toml(path)
    assert Config.from_toml(path) == listed and listed.cache.capacity == (2, 3, 4)
    assert listed.hardware.tensor_split == (3.0, 1.0)
    assert Config.from_toml(_write(tmp_path, "")) == Config()
    for text, message in (("[cahce]\npolicy = 'lru'", "unknown section(s) cahce"),
                          ("[cache]\npolicy = 'lru'\nsize = 3", "[cache] unknown key(s) size"),
                          ("[cache]\ncapacity = 'four'", "capacity must be auto or a whole number"),
                          ("[cache]\npolicy = 'lru'\nparams = { gamma = 0.5 }", "takes no parameter 'gamma'"),
                          ("cache = 3", "[cache] must be a table"),
                          ("[cache\n", "not valid TOML")):
        bad = _write(tmp_path, text)
        with pytest.raises(MoesimError) as err:
            Config.from_toml(bad)
        assert str(err.value).startswith(str(bad)) and message in str(err.value), err.value


def _write(folder, text):
    path = folder / "c.toml"
    path.write_text(text)
    return path


def test_equal_configurations_hash_alike_and_ids_tell_them_apart():
    a, b = Config.build(policy="gamma", gamma=0.9), Config.build(policy="gamma")
    assert a != b and hash(a) != hash(b)  # a default left implicit is a different configuration
    assert a == Config.build(policy="gamma", gamma=0.9) and hash(a) == hash(Config.build(policy="gamma", gamma=0.9))
    ids = {config_id("des", "t.parquet", c) for c in (a, b, a.replace(capacity=5))}
    assert len(ids) == 3 and config_id("hitrate", "t.parquet", a) != config_id("des", "t.parquet", a)
    assert {CacheConfig(): 1}[CacheConfig()] == 1
    # a setting added after runs were stored keeps their ids at its default (a sweep resumes them), and counts when set
    for added, value in (("tensor_split", "3,1"), ("admission", "gamma")):
        before = {k: v for k, v in Config().flat().items() if k != added}
        assert config_id("des", "t.parquet", Config()) == config_id("des", "t.parquet", before)
        assert config_id("des", "t.parquet", Config.build(**{added: value})) != config_id("des", "t.parquet", Config())


def test_policy_parameters_on_the_command_line_go_to_the_policies_that_take_them(cli, tmp_path):
    from moesim.tracegen.trace import bundled_trace_path

    code, _, err = cli("sim", "hitrate", bundled_trace_path(), "--policy", "lru,fifo", "--gamma", "0.5")
    assert code == 1 and "gamma: no policy or prefetcher of this run takes it" in err
    code, out, err = cli("sim", "hitrate", bundled_trace_path(), "--policy", "lru,gamma", "--gamma", "0", "--json")
    assert code == 0, err
    import json

    lru, gamma = json.loads(out)["results"]
    assert gamma["hits"] == lru["hits"]  # γ = 0 is LRU (MELINOE Remark C.2)


def test_sim_run_saves_and_starts_from_a_configuration_file(cli, tmp_path):
    import json

    from moesim.tracegen.trace import bundled_trace_path

    saved = tmp_path / "run.toml"
    args = ("sim", "run", bundled_trace_path(), "--json")
    code, first, err = cli(*args, "--policy", "gamma", "--gamma", "0.8", "--capacity", "5", "--prefetch", "oracle",
                           "--batch", "2", "--hardware", "h100", "--save-config", saved)
    assert code == 0, err
    assert Config.from_toml(saved) == Config.build(policy="gamma", gamma=0.8, capacity=5, prefetch="oracle", batch=2,
                                                   hardware="h100")
    code, again, err = cli(*args, "--config", saved)
    assert code == 0 and _metrics(again) == _metrics(first), err
    code, changed, err = cli(*args, "--config", saved, "--capacity", "6")
    row = json.loads(changed)["results"][0]
    assert code == 0 and (row["capacity"], row["prefetch"], row["batch"], row["gamma"]) == (6, "oracle", 2, 0.8)
    saved.write_text("[workload]\nbatch = 0\n")
    code, _, err = cli(*args, "--config", saved)
    assert code == 1 and err.strip() == f"moesim: error: {saved}: [workload] batch must be at least 1, got 0"
    # typed over a file, the value is the command line's, and so is the name: the option as typed
    saved.write_text("[workload]\nbatch = 2\n")
    code, _, err = cli(*args, "--config", saved, "--batch", "-2")
    assert code == 1 and err.strip() == "moesim: error: --batch must be at least 1, got -2"


def test_a_setting_is_named_as_it_was_typed(cli, tmp_path, monkeypatch):
    """plan takes --prompt as --context too: its errors name the one typed (the last, as click takes it)."""
    recorded = tmp_path / "p.parquet"
    assert cli("trace", "synth", "--layers", "16", "--experts", "64", "--top-k", "8", "--sequences", "2", "--tokens",
               "8", "--prompt-tokens", "4", "--out", recorded)[0] == 0
    plan = ("plan", "--trace", recorded, "--model", "olmoe-1b-7b", "--hardware", "rtx4090")
    for typed, named in ((["--context", "100"], "--context 100"), (["--context=100"], "--context 100"),
                         (["--prompt", "100"], "--prompt 100")):
        code, _, err = cli(*plan, *typed)
        assert code == 1 and err.startswith(f"moesim: error: {named}: every sequence of the trace records its own "
                                            "prompt (4 tokens, the median)"), (typed, err)
    code, _, err = cli(*plan, "--context", "7", "--prompt", "100")  # one setting under two names: given twice
    assert code == 2 and err.startswith("moesim: error: --context and --prompt both given (7, then 100)"), err
    code, _, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", "rtx4090", "--context", "-5")
    assert code == 1 and err.strip() == "moesim: error: --context must be at least 0, got -5"
    code, _, err = cli("sim", "serve", "bundled", "--rate", "1", "--slo-ttft", "-1")
    assert code == 1 and err.strip() == "moesim: error: --slo-ttft must be a finite number > 0 (s), got -1.0"
    for typed, message in ((["--strategy", "lowbit-miss", "--lowbit-threshold", "2"],
                            "--lowbit-threshold must be in [0.0, 1.0], got 2.0"),
                           (["--strategy", "foo"], "--strategy must be one of gpu-cache, "),
                           (["--hardware", "nope"], "--hardware must be a preset (h100, "),
                           (["--kernel", "grouped"], "--kernel must be one of fused, per-expert, got 'grouped'")):
        code, _, err = cli("sim", "run", "bundled", *typed)
        assert code == 1 and err.startswith(f"moesim: error: {message}"), (typed, err)
    # a file's own bad value names the file, once, whatever the file's name (given as the user typed it)
    monkeypatch.chdir(tmp_path)
    for name in ("batch.toml", "run.toml"):
        (tmp_path / name).write_text("[workload]\nbatch = 0\n")
        code, _, err = cli("sim", "run", "bundled", "--config", name)
        assert code == 1 and err.strip() == f"moesim: error: {name}: [workload] batch must be at least 1, got 0"
    (tmp_path / "g.toml").write_text('[cache]\npolicy = "gamma"\n[cache.params]\ngamma = 5.0\n')
    code, _, err = cli("sim", "run", "bundled", "--config", tmp_path / "g.toml")
    assert code == 1 and err.strip() == f"moesim: error: {tmp_path / 'g.toml'}: [cache] policy gamma's gamma must be " \
                                        "in [0.0, 1.0], got 5.0"


def _metrics(out):
    import json

    return [{k: v for k, v in r.items() if k != "seconds"} for r in json.loads(out)["results"]]
