"""Command-line options generated from the settings' one declaration (``moesim.sim.config.DECLARED``: name,
type, unit, help, default), and ``--config FILE.toml`` beside them.

``@takes(names, ...)`` gives a command one option per setting in ``names``; the command receives, in
their place, what was asked (``Asked``): the configuration file's settings (or the defaults) with every
setting typed on the command line over them. A setting in ``listed`` takes a comma-separated list, one
run per value (``Asked.configs``: every combination). A command may give a setting a default of its
own (``defaults``, as text: used where neither the command line nor the file sets it), help of its own
where the setting means something narrower there (``helps``), and other option names (``aliases``).
"""

import functools
import inspect
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from moesim.cli.options import PATH
from moesim.errors import TYPED_AS, MoesimError, leading, named, render
from moesim.params import SettingError
from moesim.policies.admission import composed
from moesim.sim.config import (DECLARED, OWNERS, SETTINGS, Config, check_params_used, file_settings, on_machine,
                               owner_spec)
from moesim.sim.reads import refuse_unread

ConfigFile = Annotated[Optional[Path], typer.Option(
    "--config", click_type=PATH, help="Start from this configuration file (TOML: [model] [hardware] [cache] [prefetch] "
                                      "[execution] [workload] [serve], as 'moesim sim run --save-config' writes); "
                                      "options given here override it.")]


@dataclass
class Asked:
    """What a command line asked for: ``base`` is the configuration file's (or the defaults) with every setting
    given here over it; ``each`` the listed settings' values (name -> list); ``params`` the policy, prefetcher and
    strategy parameters given here, applied to each run whose policy (prefetcher, strategy) takes them;
    ``given`` the names set here or in the file, ``in_file`` those the file set, ``typed`` those typed here (the
    command's own defaults left out); ``inputs`` the files read (the configuration file, a hardware file), which
    no output of the command may replace; ``options`` the settings the command takes."""

    base: Config
    each: dict
    params: dict
    given: set
    in_file: set = frozenset()
    inputs: tuple = ()
    typed: frozenset = frozenset()
    options: tuple = ()

    def configs(self) -> list[Config]:
        """One configuration per combination of the listed values (the first varies slowest)."""
        combos = [dict(zip(self.each, values)) for values in itertools.product(*self.each.values())] or [{}]
        owners = {setting: list(dict.fromkeys(self._owner(c, setting) for c in combos)) for setting, _ in OWNERS.values()}
        listed = {k: v for k, v in self.each.items() if DECLARED[k].owner}  # a listed parameter (--cpu-layers 16,32)
        check_params_used(owners["policy"], {**self.params, **listed}, owners["prefetch"], owners["strategy"])
        out = []
        for combo in combos:
            config = self.base.replace(**combo)
            config = config.replace(**{k: v for k, v in self.params.items()
                                       if k in _takes(DECLARED[k].owner, self._owner(combo, DECLARED[k].owner))})
            out.append(config)
        # a typed setting none of them reads is refused; where the command takes no strategy (a hit-rate run, a plan),
        # the cache's settings are read whatever the file's
        refuse_unread(self.typed, out, reads_strategy="strategy" in self.options, typed_once=True)
        return out

    def config(self, command: str) -> Config:
        """The one configuration a command that runs one asked for."""
        configs = self.configs()
        if len(configs) > 1:
            raise MoesimError(f"{command} runs one configuration; sweep several with 'moesim sweep'")
        return configs[0]

    def _current(self, setting: str):
        return getattr(getattr(self.base, SETTINGS[setting][0]), SETTINGS[setting][1])

    def _owner(self, combo: dict, setting: str) -> str:
        """What the owner ``setting`` names in a combination: a policy with its admission (``composed``)."""
        value = combo.get(setting, self._current(setting))
        return composed(value, combo.get("admission", self._current("admission"))) if setting == "policy" else value


def _takes(owner: str, name: str) -> set:
    """The parameters the policy (prefetcher, strategy) ``name`` takes."""
    spec = owner_spec(owner, name)
    return set(spec.params) if spec is not None else set()


def option_help(name: str, listed: bool = False, default: str | None = None, help_text: str | None = None) -> str:
    """A setting's help on the command line: its declared help (or the command's, where the setting means
    something narrower there), unit and default (or the command's)."""
    s = DECLARED[name]
    text = help_text or s.help
    if s.unit:
        text += f" Unit: {s.unit}."
    if listed and help_text is None:
        text += " Comma-separated: one run per value."
    shown = s.default if default is None else default
    if shown is not None and "default" not in text.lower():
        text += f" Default: {str(shown).lower() if isinstance(shown, bool) else shown}."
    return text


def _parameter(name: str, listed: bool, default: str | None, help_text: str | None, aliases: tuple):
    s = DECLARED[name]
    flags = (s.flag, *aliases)
    help_ = option_help(name, listed, default, help_text)
    if s.kind is bool and not listed:
        flag = s.flag.removeprefix("--")
        annotation = Annotated[Optional[bool], typer.Option(f"--{flag}/--no-{flag}", *aliases, help=help_,
                                                            show_default=False)]
    else:
        kind = str if listed or s.auto else s.kind
        annotation = Annotated[Optional[kind], typer.Option(*flags, help=help_, show_default=False)]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def takes(names, listed=(), defaults: dict | None = None, helps: dict | None = None, aliases: dict | None = None):
    """A command's options for the settings ``names`` and ``--config`` (module docstring); the command
    function takes ``asked: Asked`` in their place."""
    names, defaults, helps, aliases = list(names), defaults or {}, helps or {}, aliases or {}

    def wrap(fn):
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "asked"]
        extra = [_parameter(n, n in listed, defaults.get(n), helps.get(n), tuple(aliases.get(n, ()))) for n in names]
        extra.append(inspect.Parameter("config_file", inspect.Parameter.KEYWORD_ONLY, default=None,
                                       annotation=ConfigFile))

        @functools.wraps(fn)
        def command(**kwargs):
            values = {n: kwargs.pop(n) for n in names}
            config_file = kwargs.pop("config_file")
            typed = {n for n, v in values.items() if v is not None}
            typed_as = TYPED_AS.set({n: _typed_as((DECLARED[n].flag, *aliases.get(n, ()))) for n in typed})
            try:
                return fn(**kwargs, asked=gather(values, config_file, listed, defaults))
            except MoesimError as exc:
                # rendered here, while the options as typed are known (``TYPED_AS``)
                raise MoesimError(str(_named(exc, config_file, typed, defaults, names))) from None
            finally:
                TYPED_AS.reset(typed_as)

        command.__signature__ = inspect.Signature(own + extra)
        return command

    return wrap


def _typed_as(flags: tuple) -> str:
    """Which of a setting's option names the command line typed (the last, as click takes the last value)."""
    typed = [a.split("=", 1)[0] for a in sys.argv[1:] if a.split("=", 1)[0] in flags]
    return typed[-1] if typed else flags[0]


def _named(exc: MoesimError, config_file: Path | None, typed: set, defaults: dict, names=()) -> MoesimError:
    """An error about a setting (a ``SettingError``, or one whose message opens with the setting it is about,
    ``moesim.errors.named``): one typed names its option as typed (``--batch must be a whole number from 1 ...``), one
    the configuration file gave for the command (one of its ``names``) names the file (once), one of a value nobody
    gave (the command's ``defaults``, else the declared one) names it as the default; any other error as it was
    (``--engine llama.cpp``, an option of validate's own, is not the file's ``engine``)."""
    raw = Exception.__str__(exc)
    if config_file is not None and raw.startswith(f"{config_file}:"):
        return exc
    if isinstance(exc, SettingError):  # its text without the section: ``max_batch_tokens 2048 cannot hold ...``
        setting, value, end, raw = exc.setting, None, 0, f"{named(exc.setting)} {exc.problem}"
        if setting in typed:
            return MoesimError(raw)
    else:
        setting, value, end = leading(raw)
    if setting not in typed and setting in names and config_file is not None and setting in file_settings(config_file):
        return MoesimError(f"{config_file}: {render(Exception.__str__(exc), 'file')}")
    if setting not in typed and value is not None and setting in DECLARED and \
            value == str(defaults.get(setting, DECLARED[setting].default)):
        # ``--capacity 4 is below top_k 8``, of a value no one typed: the command's default, named as such
        return MoesimError(f"{raw[:end]} (the default){raw[end:]}")
    return exc


def gather(values: dict, config_file: Path | None, listed=(), defaults: dict | None = None) -> Asked:
    """``Asked`` from the options' values (None: not given), the configuration file and the command's defaults."""
    base = Config.from_toml(config_file) if config_file is not None else Config()
    in_file = file_settings(config_file) if config_file is not None else set()
    typed = frozenset(n for n, v in values.items() if v is not None)
    given = typed | in_file
    for name, text in (defaults or {}).items():
        if values.get(name) is None and name not in in_file:
            values[name] = text
    each, plain, params = {}, {}, {}
    for name, value in values.items():
        if value is None:
            continue
        s = DECLARED[name]
        if name in listed:
            items = [v.strip() for v in str(value).split(",")]
            if not all(items):  # '20,,24' or a trailing comma: a value left out, not a list of two
                raise MoesimError(f"{named(name)} is empty" if not any(items)
                                  else f"{named(name, value)}: an empty entry")
            each[name] = [s.parse(v) for v in items]
            same = [v.lower() if isinstance(v, str) else v for v in each[name]]  # Q4_K is q4_k
            twice = next((v for i, v in enumerate(each[name]) if same[i] in same[:i]), None)
            if twice is not None:  # each value is a run: a value listed twice ran the same run twice
                raise MoesimError(f"{named(name, value)}: {twice} listed twice; each value is one run")
            continue
        if isinstance(value, str) and (s.auto or s.kind is not str):
            value = s.parse(value)
        (params if s.owner else plain)[name] = value
    base = base.replace(**plain)
    if "strategy" in values:  # a command that runs a strategy: on a machine without a GPU, llama.cpp's CPU build
        base = on_machine(base, given)
    inputs = tuple(Path(f) for f in (config_file, base.hardware.machine) if f is not None and Path(f).is_file())
    return Asked(base, each, params, given, in_file, inputs, typed, tuple(values))
