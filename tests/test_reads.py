"""Which runs read a setting (``moesim.sim.reads``): each rule refuses its settings where every run leaves them, and
none where one run reads them; the rules name only declared settings."""

import pytest

from moesim.errors import MoesimError
from moesim.sim.config import DECLARED, Config
from moesim.sim.reads import AUDITED, LOOKED_AT, RULES, refuse_unread
from moesim.tracegen.models import get_model

# one case a rule: a setting it covers, a run that leaves it unread, a run that reads it
CASES = [
    ("capacity", dict(strategy="cpu-experts"), dict(strategy="cpu-miss"),
     "capacity: strategy cpu-experts keeps no expert cache (it places experts: cpu_layers), so nothing reads it"),
    ("ssd", dict(), dict(dram_capacity=8, ssd="pcie5-nvme"), "ssd: with no dram_capacity"),
    ("threads", dict(), dict(strategy="cpu-miss"), "threads: strategy gpu-cache computes no expert on the host CPU"),
    ("kernel", dict(engine="Mixtral-offloading"), dict(),
     "kernel: engine Mixtral-offloading runs its own kind of expert kernel (per-expert)"),
    ("kernel", dict(hardware="ryzen-7950x"), dict(), "kernel: ryzen-7950x has no GPU (every expert runs on the CPU)"),
    ("arrival_seed", dict(arrivals="burst"), dict(arrivals="burst", draft_tokens=1), "arrival_seed: arrivals='burst'"),
    ("acceptance", dict(), dict(draft_tokens=2), "acceptance: with draft_tokens=0 no run drafts a token to accept"),
    ("policy", dict(capacity=0), dict(capacity=2), "policy: capacity=0 keeps no expert cache, so nothing reads it"),
    ("mode", dict(), dict(prefetch="oracle"), "mode: prefetch='none' makes no prediction"),
]


def test_every_rule_has_a_case_and_names_declared_settings():
    assert len(CASES) == sum(rule.of == "config" for rule in RULES)
    assert AUDITED <= set(DECLARED) and LOOKED_AT <= set(DECLARED) | {"model"}


@pytest.mark.parametrize("name, leaves, reads, message", CASES)
def test_a_setting_every_run_leaves_is_refused_and_one_a_run_reads_is_taken(name, leaves, reads, message):
    left = Config.build(**leaves)
    with pytest.raises(MoesimError) as exc:
        refuse_unread({name}, [left], typed_once=True)
    assert str(exc.value).startswith(message) and str(exc.value).endswith("so nothing reads it")
    refuse_unread({name}, [left, Config.build(**reads)], typed_once=True)  # one run reads it: taken


# settings a run's configuration varies in, each with values a rule may tell apart
VARIED = {"strategy": ("gpu-cache", "cpu-experts", "cpu-miss"), "capacity": (0, 4), "prefetch": ("none", "oracle"),
          "hardware": ("rtx4090", "ryzen-7950x"), "engine": ("auto", "Mixtral-offloading", "llama.cpp"),
          "dram_capacity": (None, 8), "arrivals": ("poisson", "burst"), "draft_tokens": (0, 2), "requests": (None, 3),
          "policy": ("lru", "lfu"), "kernel": ("fused", "per-expert"), "force": (False, True)}


@pytest.mark.parametrize("rule", [r for r in RULES if r.of == "config"], ids=lambda r: "+".join(r.names[:2]))
def test_each_rule_reads_only_the_settings_it_says_it_looks_at(rule):
    """A sweep builds one configuration per distinct value of what the rules look at (``LOOKED_AT``): a rule whose
    verdict moved with another setting would be asked of the wrong runs."""
    for base in (Config.build(), Config.build(strategy="cpu-experts"), Config.build(capacity=0, prefetch="none")):
        for key, values in VARIED.items():
            if key in rule.looks_at:
                continue
            verdicts = set()
            for value in values:
                try:
                    verdicts.add(rule.leaves(base.replace(**{key: value})))
                except MoesimError:
                    continue  # a combination no run takes
            assert len(verdicts) <= 1, (key, base)


def test_rules_that_need_the_strategy_or_one_typed_value_are_asked_only_there():
    """A hit-rate run reads a cache's settings whatever the strategy; the API's caller may loop over capacity 0."""
    cpu = Config.build(strategy="cpu-experts")
    refuse_unread({"policy"}, [cpu], reads_strategy=False)
    refuse_unread({"policy"}, [Config.build(capacity=0)])  # not listed
    with pytest.raises(MoesimError, match="^policy, gamma: strategy cpu-experts keeps no expert cache .*them$"):
        refuse_unread({"policy", "gamma"}, [cpu.replace(policy="gamma", gamma=0.5)])


def test_a_mole_models_run_reads_no_cache_setting():
    mole, mixtral = get_model("mole-160m-4e"), get_model("mixtral-8x7b")
    with pytest.raises(MoesimError, match="^prefetch: model mole-160m-4e computes its experts as lookup tables"):
        refuse_unread({"prefetch"}, models=[mole])
    refuse_unread({"prefetch"}, models=[mole, mixtral])


def test_a_tensor_split_is_read_on_a_machine_of_several_gpus_only():
    """-ts shares are refused where the run's machine, named or built in code, has fewer than two GPUs."""
    from pathlib import Path

    from moesim.sim.hardware import get_hardware, load_hardware

    two = Path(__file__).resolve().parents[1] / "examples" / "two-3090.toml"
    one = Config.build(tensor_split="1,1")
    with pytest.raises(MoesimError, match="^tensor_split: rtx4090 has fewer than two GPUs: no layer is split over "
                                          "GPUs, so nothing reads it$"):
        refuse_unread({"tensor_split"}, [one])
    refuse_unread({"tensor_split"}, [one.replace(hardware=str(two))])
    refuse_unread({"tensor_split"}, [one], machines=[load_hardware(two)])  # built in code: its own GPUs
    refuse_unread({"tensor_split"}, [one.replace(hardware="nowhere.toml")])  # unreadable: the run reports that
    with pytest.raises(MoesimError, match="^tensor_split: rtx4090 has fewer"):
        refuse_unread({"tensor_split"}, [one.replace(hardware=str(two))], machines=[get_hardware("rtx4090")])


def test_a_layout_over_sockets_is_read_on_a_machine_of_several_sockets_only():
    """``numa`` is refused where the run's machine, named or built in code, has one socket (or no CPU), and where no
    expert is computed on the CPU; a machine of two sockets reads it."""
    from dataclasses import replace

    from moesim.sim.hardware import get_hardware

    spread = Config.build(strategy="cpu-experts", numa="distribute")
    with pytest.raises(MoesimError, match="^numa: rtx4090 has one CPU socket at most: every layout of the threads reads "
                                          "the same DRAM, so nothing reads it$"):
        refuse_unread({"numa"}, [spread])
    one = get_hardware("rtx4090")
    two = replace(one, cpu=replace(one.cpu, sockets=2))
    refuse_unread({"numa"}, [spread], machines=[two])
    with pytest.raises(MoesimError, match="^numa: strategy gpu-cache computes no expert on the host CPU"):
        refuse_unread({"numa"}, [Config.build(numa="one-pool")], machines=[two])
