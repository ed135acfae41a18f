"""A setting's declaration (a section field's or a plug-in's parameter) and what a plug-in declares
(``moesim.params.Param``, ``PolicySpec``, ``PrefetcherSpec``, ``StrategySpec``): a kind is declared, not read off a
default; one check judges a value; two owners share a name only by sharing its declaration; a spec missing what its
roles need is refused as the package loads."""

from dataclasses import fields, replace

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.params import INT_MOST, SEED_MOST, Param, SettingError
from moesim.policies import POLICIES, get_policy
from moesim.policies.prefetch import PrefetcherSpec
from moesim.sim.config import DECLARED, PARAMS_OF, SECTIONS, Config, declared_params
from moesim.sim.strategies import STRATEGIES
from moesim.sim.strategies.base import A_CPU, A_LOAD, StrategySpec, all_cached, all_loaded


@pytest.mark.parametrize("param, value, want", [
    (Param(0, "seed", "s"), np.int64(7), 7),
    (Param(0, "seed", "s"), SEED_MOST, SEED_MOST),
    (Param("auto", "count", "c", auto=True), "auto", "auto"),
    (Param("auto", "count", "c", auto=True), np.int32(3), 3),
    (Param(0.5, "number", "n", bounds=(0.0, 1.0)), 1, 1.0),
    (Param("a", "choice", "c", choices=("a", "b")), "b", "b"),
    (Param(None, "trace", "t"), "x.parquet", "x.parquet"),
    (Param(None, "shares", "s", optional=True), "3, 1", (3.0, 1.0)),  # the command line's text
    (Param(None, "shares", "s", optional=True), [0, 2.5], (0.0, 2.5)),  # a configuration file's array
    (Param(None, "shares", "s", optional=True), np.array([1, 1]), (1.0, 1.0)),
])
def test_a_value_is_taken_as_the_run_takes_it(param, value, want):
    got = param.check(value)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("param, value, message", [
    (Param(0, "seed", "s"), -1, "must be at least 0, got -1"),
    (Param(0, "seed", "s"), True, f"must be a whole number from 0 to {SEED_MOST:,}, got True"),
    (Param(0, "count", "c"), INT_MOST + 1, f"must be at most {INT_MOST:,}, got {INT_MOST + 1:,}"),
    (Param("auto", "count", "c", auto=True), "all", f"must be auto or a whole number from 0 to {INT_MOST:,}, got 'all'"),
    (Param(0.5, "number", "n", bounds=(0.0, 1.0)), float("nan"), "must be a finite number, got nan"),
    (Param(0.5, "number", "n", bounds=(0.0, 1.0)), 1.5, "must be in [0.0, 1.0], got 1.5"),
    (Param("a", "choice", "c", choices=("a", "b")), "c", "must be one of a, b, got 'c'"),
    (Param("a", "choice", "c", choices=lambda: ("a", "b")), None, "must be one of a, b, got None"),
    (Param(1, "count", "c", bounds=(1, 8)), 0, "must be at least 1, got 0"),
    (Param(1, "count", "c", bounds=(1, 8)), 9, "must be at most 8, got 9"),
    (Param(None, "size", "s", unit="GiB", optional=True), 0, "must be a finite number > 0 (GiB), got 0"),
    (Param(0.5, "size", "s", bounds=(0.0, 1.0)), 1.5, "must be a finite number > 0 and at most 1, got 1.5"),
    (Param(0.5, "size", "s", bounds=(0.0, 1.0)), 0, "must be a finite number > 0 and at most 1, got 0"),
    (Param(False, "flag", "f"), "yes", "must be true or false, got 'yes'"),
    (Param("x", "name", "n"), "", "must be a name, got ''"),
    (Param(None, "file", "f"), "", "must be a file's path, got ''"),
    # a value whose repr runs long (a trace in memory) is named by its type
    (Param(None, "trace", "t"), list(range(100)), "must be a file's path, got a list"),
] + [(Param(None, "shares", "s", optional=True), value, f"must be numbers >= 0, not all 0 (3,1), got {shown}")
     for value, shown in (("0,0", "'0,0'"), ("-1,2", "'-1,2'"), ("nan,1", "'nan,1'"), ("1,,1", "'1,,1'"), ("", "''"),
                          ([True, False], "[True, False]"), (3, "3"), ({"a": 1}, "{'a': 1}"), ([], "[]"),
                          ([1, "x"], "[1, 'x']"), ([float("inf")], "[inf]"))])
def test_a_wrong_value_is_refused_saying_what_it_must_be(param, value, message):
    with pytest.raises(MoesimError) as exc:
        param.check(value)
    assert str(exc.value) == message


def test_a_left_out_or_auto_value_is_taken_where_declared_and_numbers_become_pythons():
    assert Param(None, "size", "s", optional=True).check(None) is None
    assert Param("auto", "count", "c", auto=True).check("auto") == "auto"
    assert type(Param(0, "count", "c").check(np.int32(3))) is int and type(Param(1.0, "size", "s").check(2)) is float
    with pytest.raises(MoesimError, match="got None"):
        Param(1.0, "size", "s").check(None)


def test_every_section_field_is_declared_by_a_param_and_refused_by_name():
    """The schema: each ``Config`` field (but a plug-in's ``params``) carries its ``Param``, and a value refused is a
    ``SettingError`` naming the flat setting and the TOML key where they differ."""
    for section in SECTIONS.values():
        assert all("param" in f.metadata for f in fields(section) if f.name != "params"), section
    with pytest.raises(SettingError) as exc:
        Config.build(prefetch="nope")
    assert exc.value.setting == "prefetch" and str(exc.value).startswith("[prefetch] prefetcher must be one of none,")
    assert exc.value.problem.endswith("got 'nope'")


def test_a_count_is_not_checked_as_a_seed():
    """The kind is declared: a layer count past 2^31 is refused where a seed of that size is taken."""
    assert Param(0, "seed", "s").check(2 ** 40) == 2 ** 40
    with pytest.raises(MoesimError, match="at most 2,147,483,647, got 1,099,511,627,776"):
        Param(0, "count", "c").check(2 ** 40)


@pytest.mark.parametrize("kwargs", [dict(default=0, kind="int", help="h"), dict(default=0, kind="seed", help=""),
                                    dict(default="a", kind="choice", help="h"),
                                    dict(default=2.0, kind="number", help="h", bounds=(0.0, 1.0))])
def test_a_declaration_that_cannot_be_checked_is_refused(kwargs):
    """An unknown kind, no help, a choice without choices, a default its own check refuses."""
    with pytest.raises(MoesimError):
        Param(**kwargs)


def test_two_owners_share_a_name_only_by_sharing_its_param():
    """random and lecar both take ``--seed``: one ``Param``, one setting. Two that differ are refused, naming the
    second owner."""
    assert get_policy("random").params["seed"] is get_policy("lecar").params["seed"]
    assert get_policy("gamma").params["gamma"] is get_policy("gamma-admit").params["gamma"]
    a, b = (StrategySpec(name, name, all_cached, all_loaded, (A_LOAD,), True, False, True,
                         params={"x": Param(0, kind, "x")}) for name, kind in (("a", "seed"), ("b", "count")))
    with pytest.raises(MoesimError, match="^strategy b declares parameter x unlike another setting of that name"):
        declared_params({"execution": ("strategy", [a, b])})
    with pytest.raises(MoesimError, match="^strategy a declares parameter x unlike another"):  # another section's
        declared_params({"cache": ("policy", [replace(a, name="p")]), "execution": ("strategy", [a])})
    with pytest.raises(MoesimError, match="^strategy a declares parameter capacity unlike another"):  # a field's
        declared_params({"execution": ("strategy", [replace(a, params={"capacity": a.params["x"]})])})


def test_every_setting_of_a_plug_in_comes_from_its_param():
    """The command line's type, default, help and auto of each parameter are its ``Param``'s."""
    for section, (owner, params) in PARAMS_OF.items():
        for name, param in params.items():
            s = DECLARED[name]
            assert (s.section, s.owner, s.kind, s.default, s.help, s.auto) == \
                (section, owner, param.parses, param.default, param.help, param.auto)
    assert {n for p in POLICIES for n in get_policy(p).params} == set(PARAMS_OF["cache"][1])


def test_a_parameter_is_checked_by_its_owners_param_and_named_so():
    with pytest.raises(MoesimError, match=r"^\[execution\] strategy lowbit-miss's lowbit_dtype must be one of int4, "
                                          r"int2, got 'int3'$"):
        Config.build(strategy="lowbit-miss", lowbit_dtype="int3")
    with pytest.raises(MoesimError, match=r"^\[cache\] policy gamma's gamma must be in \[0.0, 1.0\], got 2.0$"):
        Config.build(policy="gamma", gamma=2.0)


def test_a_strategys_roles_are_declared():
    """Where layers are placed is a declared role (``places``), not a parameter's name; cpu-experts is the one."""
    assert {n: s.places for n, s in STRATEGIES.items() if s.places} == {"cpu-experts": "cpu_layers"}
    assert {n for n, s in STRATEGIES.items() if s.cpu} == {"cpu-experts", "cpu-miss", "hybrid"}
    assert {n for n, s in STRATEGIES.items() if not s.cache} == {"cpu-experts"}


@pytest.mark.parametrize("kwargs", [
    dict(actions=()),                                           # no action
    dict(actions=(9,)),                                         # not one of the loop's
    dict(places="layers"),                                      # places by a parameter it does not declare
    dict(cache=False),                                          # no cache, and nothing to describe its placement by
])
def test_a_strategy_missing_what_its_roles_need_is_refused(kwargs):
    spec = dict(name="t", summary="t", placement=all_cached, miss_actions=all_loaded, actions=(A_LOAD, A_CPU),
                cache=True, cpu=True, prefetch=True)
    with pytest.raises(MoesimError, match="^strategy t: it must declare (its actions|the parameter|describe)"):
        StrategySpec(**{**spec, **kwargs})


def test_a_policy_declares_its_hooks_and_params_as_the_contract_says():
    from moesim.policies.base import PolicySpec, hooks

    lru = get_policy("lru")
    with pytest.raises(TypeError, match="^policy p: its hooks come from hooks"):
        PolicySpec("p", lru.make_state, {"choose_victim": lru.hooks["choose_victim"]})  # not through hooks(...)
    with pytest.raises(TypeError, match="^policy p: its hooks come from hooks"):
        PolicySpec("p", lru.make_state, hooks(choose_victim=lru.hooks["choose_victim"]), params={"seed": 0})


@pytest.mark.parametrize("kind, fns", [("next", {}), ("next", {"scores": len}), ("preload", {"predict": len}),
                                       ("later", {"predict": len})])
def test_a_prefetcher_has_the_function_its_kind_calls(kind, fns):
    with pytest.raises(MoesimError, match="^prefetcher p: a next prefetcher has predict, a preload one scores$"):
        PrefetcherSpec("p", kind, **fns)
