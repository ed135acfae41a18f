"""The fast-path tests' helper: a policy with one of its ``fast_paths`` watched, for the duration of a ``with``."""

from dataclasses import replace
from importlib import import_module
from unittest import mock

from moesim.policies import get_policy


def watched(policy: str, made: list, index: int = 0, alone: bool = False):
    """The policy with its fast path ``index`` adding what each call of its ``make`` gives (a state, or hits) to
    ``made``; with ``alone`` that path is its only one."""
    spec = get_policy(policy)
    path = spec.fast_paths[index]
    watching = replace(path, make=lambda *a: made.append(path.make(*a)) or made[-1])
    paths = (watching,) if alone else (*spec.fast_paths[:index], watching, *spec.fast_paths[index + 1:])
    return mock.patch.object(import_module(f"moesim.policies.{policy}"), "SPEC", replace(spec, fast_paths=paths))
