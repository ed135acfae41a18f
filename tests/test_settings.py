"""Every setting is declared once (``moesim.sim.config.DECLARED``): the command line's options of every
command that runs a simulation are generated from it, ``--config FILE.toml`` works on each, and the
public API takes the same settings, refusing those its kind of run does not read."""

import json

import pytest

import moesim
from moesim.errors import MoesimError
from moesim.experiments.plan import PLAN_SETTINGS
from moesim.replay.run import REPLAY_SETTINGS
from moesim.sim.config import DECLARED, RUN_SETTINGS, SETTINGS, Config
from moesim.tracegen.trace import bundled_trace_path

TRACE = bundled_trace_path()
# each command that runs a simulation, and the settings it takes
COMMANDS = {("sim", "hitrate"): RUN_SETTINGS["hitrate"], ("sim", "run"): RUN_SETTINGS["des"],
            ("sim", "serve"): RUN_SETTINGS["serve"], ("plan",): (*PLAN_SETTINGS, "dtype"),
            ("replay",): REPLAY_SETTINGS,
            ("validate",): REPLAY_SETTINGS,
            ("sim", "mrc"): tuple(n for n in RUN_SETTINGS["hitrate"] if n != "split")}


def options_of(command) -> dict:
    """The command's options: flag -> its help text, as click holds them."""
    import typer.main

    from moesim.cli.app import app

    group = typer.main.get_command(app)
    for name in command:
        group = group.commands[name]
    return {flag: param.help or "" for param in group.params for flag in param.opts}


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_each_command_has_an_option_per_setting_with_its_declared_help(command):
    options = options_of(command)
    assert "--config" in options
    for name in COMMANDS[command]:
        setting = DECLARED[name]
        assert setting.flag in options, (command, name)
        assert setting.unit in options[setting.flag], (command, name)


def test_every_setting_and_parameter_is_declared_once_with_help():
    assert set(SETTINGS) <= set(DECLARED)
    for s in DECLARED.values():
        assert s.help and s.kind in (str, int, float, bool) and s.flag.startswith("--"), s
    flags = [s.flag for s in DECLARED.values()]
    assert len(flags) == len(set(flags))


def test_a_setting_typed_on_the_command_line_is_parsed_as_declared(cli):
    code, _, err = cli("sim", "run", TRACE, "--batch", "two")
    assert code == 2 and "--batch" in err
    code, _, err = cli("sim", "run", TRACE, "--capacity", "four")
    assert code == 1 and "--capacity must be auto or a whole number" in err


@pytest.mark.parametrize("command, extra, section", [
    (("sim", "hitrate"), (), "[cache]\npolicy = \"gamma\"\ncapacity = 3\nsemantics = \"sequential\"\n"
                             "params = { gamma = 0.5 }\n"),
    (("sim", "mrc"), ("--capacity", "3"), "[cache]\npolicy = \"gamma\"\nsemantics = \"sequential\"\n"
                                          "params = { gamma = 0.5 }\n"),
    (("sim", "run"), (), "[model]\ndtype = \"q4_k\"\n[cache]\npolicy = \"lfu\"\ncapacity = 3\n"),
    (("sim", "serve"), (), "[model]\ndtype = \"q4_k\"\n[cache]\ncapacity = 3\n[serve]\nrate = 2.0\nrequests = 3\n"),
    (("replay",), ("--backend", "virtual"), "[model]\ndtype = \"q4_k\"\n[cache]\npolicy = \"lfu\"\ncapacity = 3\n"),
])
def test_config_files_work_on_every_command_and_typed_options_override_them(cli, tmp_path, command, extra,
                                                                              section):
    """The file's settings are the run's; an option typed beside it wins; the same run built through the API
    gives the same numbers."""
    path = tmp_path / "run.toml"
    path.write_text(section)
    code, out, err = cli(*command, TRACE, *extra, "--config", path, "--json")
    assert code == 0, err
    from_file = json.loads(out)
    config = Config.from_toml(path)
    trace = moesim.load_trace(TRACE)
    if command == ("sim", "hitrate"):
        assert from_file["results"][0]["hits"] == moesim.hitrate(trace, config=config).hits
        assert from_file["results"][0]["policy"] == "gamma" and from_file["results"][0]["capacity"] == 3
        code, out, _ = cli(*command, TRACE, "--config", path, "--capacity", "5", "--json")
        assert json.loads(out)["results"][0]["hits"] == moesim.hitrate(trace, capacity=5, config=config).hits
    elif command == ("sim", "mrc"):
        rows = {r["policy"]: r for r in from_file["results"]}
        assert rows["gamma"]["hits"] == moesim.hitrate(trace, capacity=3, config=config).hits
    elif command == ("sim", "run"):
        (row,) = from_file["results"]
        assert row["policy"] == "lfu" and row["tpot_s"] == moesim.simulate(trace, config).tpot_s
        code, out, _ = cli(*command, TRACE, "--config", path, "--policy", "lru", "--json")
        assert json.loads(out)["results"][0]["tpot_s"] == moesim.simulate(trace, config, policy="lru").tpot_s
    elif command == ("sim", "serve"):
        assert from_file["summary"]["requests"] == 3 and from_file["summary"]["rate"] == 2.0
        assert from_file["summary"]["tpot_s"] == moesim.serve(trace, config).summary["tpot_s"]
    else:
        assert from_file["policy"] == "lfu" and from_file["tpot_s"] == from_file["sim_tpot_s"]
        assert from_file["sim_tpot_s"] == moesim.simulate(trace, config).tpot_s


def test_the_api_takes_a_runs_settings_and_refuses_the_others(mixtral):
    config = Config.build(policy="gamma", gamma=0.5, capacity=3, semantics="sequential")
    assert moesim.hitrate(mixtral, config=config).hits == moesim.hitrate(mixtral, "gamma", 3, gamma=0.5,
                                                                          semantics="sequential").hits
    assert [r.hits for r in moesim.mrc(mixtral, config=config, capacities=[3])] == \
        [moesim.hitrate(mixtral, config=config).hits]
    with pytest.raises(MoesimError, match="hardware: a hit-rate run does not read it"):
        moesim.hitrate(mixtral, "lru", 4, hardware="h100")
    with pytest.raises(MoesimError, match="max_batch: a simulated run does not read it"):
        moesim.simulate(mixtral, max_batch=4)
    with pytest.raises(MoesimError, match="batch: a served stream does not read it"):
        moesim.serve(mixtral, batch=2)
    with pytest.raises(MoesimError, match="policy: a plan does not take it"):
        moesim.plan("mixtral-8x7b", policy="lru")


def test_a_boolean_setting_parses_its_words():
    assert DECLARED["reset"].parse("false") is False and DECLARED["dynamic_kv"].parse("yes") is True
    with pytest.raises(MoesimError, match="--reset must be true or false"):
        DECLARED["reset"].parse("maybe")


def test_a_message_names_a_setting_and_its_reader_renders_it():
    """``named`` marks a setting in a message; ``render`` types it as its reader does: the command line as an option
    (a switch bare), Python as a keyword, a configuration file as its key."""
    from moesim.errors import TYPED_AS, leading, named, render

    text = f"{named('capacity', 0)} keeps no cache; pass {named('force', True)}, {named('chunked_prefill', False)} " \
        f"or {named('arrivals', 'burst')} with {named('rate')}"
    assert render(text, "cli") == "--capacity 0 keeps no cache; pass --force, --no-chunked-prefill or --arrivals " \
                                  "burst with --rate"
    assert render(text, "python") == "capacity=0 keeps no cache; pass force=True, chunked_prefill=False or " \
                                     "arrivals='burst' with rate"
    assert render(text, "file").startswith("capacity 0 keeps no cache")
    assert str(MoesimError(text)) == render(text, "python")  # the API's reader
    typed = TYPED_AS.set({"prompt": "--context"})  # plan takes --prompt as --context too: the one typed
    try:
        assert render(named("prompt", 100), "cli") == "--context 100"
    finally:
        TYPED_AS.reset(typed)
    assert leading(text)[:2] == ("capacity", "0") and leading("plain " + text) == ("", None, 0)


def test_the_simulator_names_settings_and_formats_no_option():
    """No module of sim/ asks who reads its messages or how a setting was typed: it names settings (``named``), and
    ``moesim.errors.render`` types them for the reader."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "sim"
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "READER" not in text and "TYPED_AS" not in text and "option(" not in text, path
