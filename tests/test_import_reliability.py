"""trace import, empty paths, train ml-ffn's capacity and sim run --save-config as a user meets them: every import
error names the log (and its line), a log's other fields are ignored alike in every format while a read one
misspelt is refused, an empty path is named as such, a message names only the options its command takes, and a
saved configuration starts the same run from any folder."""

import json
import os

import numpy as np
import pytest

from moesim.errors import MoesimError

from moesim.sim.config import Config
from moesim.tracegen.io import load_trace


def refused(cli, folder, *args) -> str:
    """The one line a command is refused with (exit 1); ``folder`` is left as it was (no output, no spill folder)."""
    before = set(folder.iterdir())
    code, _, err = cli(*args)
    assert code == 1 and err.count("\n") == 1 and err.startswith("moesim: error: "), (code, err)
    assert set(folder.iterdir()) == before
    return err.removeprefix("moesim: error: ").rstrip("\n")


def _records(tokens=2, layers=2, **fields):
    return [{"dataset": "d", "problem_id": 0, "layer": layer, "experts": [layer % 4, (layer + 1) % 4],
             "gating_probs": [0.6, 0.4], "token_idx": t, **fields} for t in range(tokens) for layer in range(layers)]


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _set(records, index, **fields):
    records = [dict(r) for r in records]
    records[index].update(fields)
    return records


# (records, --model, the message after the log's name): without --model L, E and k are inferred from the log, and
# a value no trace holds said "metadata: num_experts must be an integer in 1..32767, got 0", naming no file
@pytest.mark.parametrize("records, model, message", [
    ([dict(r, experts=[-1, -2]) for r in _records()], None, ":1: expert -2 out of range 0..32766 (experts count from 0)"),
    ([dict(r, layer=-1) for r in _records(layers=1)], None, ":1: layer -1 out of range 0..32766 (layers count from 0)"),
    (_set(_records(), 2, experts=[40000, 1]), None, ":3: expert 40000 out of range 0..32766 (experts count from 0)"),
    (_set(_records(), 3, layer=40000), None, ":4: layer 40000 out of range 0..32766 (layers count from 0)"),
    ([dict(r, experts=[]) for r in _records()], None, ":1: 'experts' lists no expert"),
    (_set(_records(), 2, experts=[0, 1, 2]), None,
     ":3: 3 experts, line 1 has 2 (every record lists its token's top-k experts; --model names k)"),
    ([dict(r, experts=[0, 0, 0]) for r in _records()], None,
     ":1: 3 experts, more than the 1 expert ids 0..0 the log names (--model names the model's)"),
    # beyond the model's experts, or below 0, with --model: named by line as before
    (_set(_records(layers=32), 0, experts=[-1, 0]), "mixtral-8x7b", ": line 1 (seq 0, step 0, layer 0): expert -1 out "
                                                                    "of range 0..7"),
    (_set(_records(layers=32), 33, experts=[8, 0]), "mixtral-8x7b", ": line 34 (seq 0, step 1, layer 1): expert 8 out "
                                                                     "of range 0..7"),
])
def test_every_import_error_names_the_log(cli, tmp_path, records, model, message):
    src = _jsonl(tmp_path / "log.jsonl", records)
    args = ("trace", "import", src, "--out", tmp_path / "t.parquet") + (("--model", model) if model else ())
    assert refused(cli, tmp_path, *args) == f"{src}{message}"


def test_the_real_log_with_an_expert_of_minus_one_names_its_line(cli, tmp_path, shared_jsonl):
    """The Mixtral log, its first record's expert 7 made -1: the error names the log's copy and its first line."""
    lines = shared_jsonl.read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    assert first["experts"] == [7, 0]
    src = tmp_path / "gsm8k.jsonl"
    src.write_text(json.dumps(dict(first, experts=[-1, 0])) + "\n" + "".join(lines[1:]))
    for model in ((), ("--model", "mixtral-8x7b")):
        assert refused(cli, tmp_path, "trace", "import", src, "--out", tmp_path / "t.parquet", *model) == \
            f"{src}: line 1 (seq 0, step 0, layer 0): expert -1 out of range 0..7"


def test_other_fields_and_columns_are_ignored_in_every_format(cli, tmp_path):
    """JSONL records' other fields were ignored and a CSV table's other columns refused: both are ignored now (a
    serving log's request id, timestamp, note), and the trace is the one the plain log gives."""
    plain = _jsonl(tmp_path / "plain.jsonl", _records())
    extra = _jsonl(tmp_path / "extra.jsonl", _records(request_id="r-1", ts=1.5, meta={"Layer": 9, "phase": "x"}))
    table = "seq,step,layer,e0,e1\n" + "".join(f"0,{t},{layer},{layer % 4},{(layer + 1) % 4}\n"
                                                for t in range(2) for layer in range(2))
    (tmp_path / "plain.csv").write_text(table)
    rows = table.splitlines()
    (tmp_path / "extra.csv").write_text("\n".join([f"note,{rows[0]},ts"] + [f'"a, ""b""",{r},' for r in rows[1:]])
                                        + "\n")
    # a quoted header with a comma in it, an ignored column twice, a nested object's keys in every record
    (tmp_path / "quoted.csv").write_text("\n".join([f'{rows[0]},"note, free",id,id'] + [f"{r},x,1,2" for r in rows[1:]])
                                         + "\r\n")
    nested = _jsonl(tmp_path / "nested.jsonl", _records(meta={"Layer": 9, "Phase": 0, " token_idx": 3}))
    mixed = _records()  # an ignored field of two types beside a key with a capital: polars' schema of it fails
    mixed[0]["meta"], mixed[1]["meta"], mixed[2]["Note"] = [1, 2], {"a": 1}, "x"
    mixed = _jsonl(tmp_path / "mixed.jsonl", mixed)
    for src, fmt in ((plain, "vllm-jsonl"), (extra, "vllm-jsonl"), (nested, "vllm-jsonl"), (mixed, "vllm-jsonl"),
                     (tmp_path / "plain.csv", "csv"), (tmp_path / "extra.csv", "csv"), (tmp_path / "quoted.csv", "csv")):
        code, _, err = cli("trace", "import", src, "--format", fmt, "--out", tmp_path / f"{src.name}.parquet")
        assert code == 0, err
    base = load_trace(tmp_path / "plain.jsonl.parquet")
    for name in ("extra.jsonl", "nested.jsonl", "mixed.jsonl", "plain.csv", "extra.csv", "quoted.csv"):
        trace = load_trace(tmp_path / f"{name}.parquet")
        assert np.array_equal(trace.experts, base.experts) and np.array_equal(trace.phase, base.phase), name


@pytest.mark.parametrize("name, body, message", [
    # a read field or column in other letters or spacing was read as absent: 'Phase' left every token decoding
    ("log.jsonl", "".join(json.dumps(r) + "\n" for r in _set(_records(), 1, Phase=0)),
     ":2: field 'Phase' is read as 'phase' only when spelt so (a vllm-jsonl record's fields: dataset, problem_id, "
     "layer, experts, gating_probs, token_idx, token_pos, phase; others are ignored)"),
    ("log.jsonl", "".join(json.dumps(r) + "\n" for r in _set(_set(_set(_records(), 0, meta=[1]), 1, meta={"a": 1}),
                                                              3, Phase=0)),  # beside a field of two types
     ":4: field 'Phase' is read as 'phase' only when spelt so (a vllm-jsonl record's fields: dataset, problem_id, "
     "layer, experts, gating_probs, token_idx, token_pos, phase; others are ignored)"),
    ("log.jsonl", "".join(json.dumps(r) + "\n" for r in _set(_records(), 2, token_Idx=3)),
     ":3: field 'token_Idx' is read as 'token_idx' only when spelt so (a vllm-jsonl record's fields: dataset, "
     "problem_id, layer, experts, gating_probs, token_idx, token_pos, phase; others are ignored)"),
    ("t.csv", "seq,step,layer,e0,e1, phase\n0,0,0,1,2,0\n",
     ":1: unknown column(s) ' phase': a table's own columns (seq, step, layer, phase, e0..ek-1) are read only when "
     "spelt so, a column of any other name is ignored"),
    ("t.csv", "seq,step,layer,E0,e1\n0,0,0,1,2\n",
     ":1: unknown column(s) 'E0': a table's own columns (seq, step, layer, phase, e0..ek-1) are read only when "
     "spelt so, a column of any other name is ignored"),
    # a row short of a column the importer does not read was taken (polars reads the missing field as empty)
    ("t.csv", "seq,step,layer,e0,e1,note\n0,0,0,1,2,a\n0,1,0,1,2\n", ":3: 5 fields, the header has 6"),
    ("t.csv", "seq,step,layer,e0,e2\n0,0,0,1,2\n", ":1: expert columns must be e0..e1, one each, got e0, e2"),
    ("t.csv", "seq,step,layer,e0,e1,layer\n0,0,0,1,2,0\n", ":1: column(s) 'layer' appear more than once"),
])
def test_a_misspelt_field_is_refused_in_every_format(cli, tmp_path, name, body, message):
    src = tmp_path / name
    src.write_text(body)
    fmt = "csv" if name.endswith(".csv") else "vllm-jsonl"
    assert refused(cli, tmp_path, "trace", "import", src, "--format", fmt, "--out", tmp_path / "t.parquet") == \
        f"{src}{message}"


TRACE_HINT = " (name a trace file, or bundled for the shipped one)"


@pytest.mark.parametrize("args, message", [
    (("trace", "info", ""), f"TRACE: the path is empty{TRACE_HINT}"),
    (("trace", "info", "  "), f"TRACE: the path is empty{TRACE_HINT}"),
    (("sim", "hitrate", "", "--capacity", "2"), f"TRACE: the path is empty{TRACE_HINT}"),
    (("sim", "run", ""), f"TRACE: the path is empty{TRACE_HINT}"),
    (("sim", "run", "bundled", "--save-config", ""), "--save-config: the path is empty"),
    (("trace", "import", "", "--out", "t.parquet"), "SRC: the path is empty"),
    (("trace", "import", "log.jsonl", "--out", ""), "--out: the path is empty"),
    (("trace", "synth", "--like", "", "--out", "t.parquet"), f"--like: the path is empty{TRACE_HINT}"),
    (("train", "ml-ffn", "", "--out", "m.npz"), f"TRAIN_TRACE: the path is empty{TRACE_HINT}"),
    (("train", "ml-ffn", "bundled", "--out", ""), "--out: the path is empty"),
    (("plan", "--model", "mixtral-8x7b", "--trace", ""), f"--trace: the path is empty{TRACE_HINT}"),
    (("sim", "run", "bundled", "--config", ""), "--config: the path is empty"),
    (("validate", ""), f"TRACE: the path is empty{TRACE_HINT}"),
    (("sweep", "", "--out", "r.parquet"), "SPEC: the path is empty"),
    (("plot", "", "--kind", "hitrate-vs-capacity", "--out", "f.png"), "INPUT: the path is empty"),
])
def test_an_empty_path_is_named_empty(cli, tmp_path, monkeypatch, args, message):
    """typer turns "" into Path("."), and the commands said '.: a folder, not a trace file'."""
    monkeypatch.chdir(tmp_path)
    assert refused(cli, tmp_path, *args) == message


def test_every_path_a_command_takes_refuses_an_empty_one():
    """Every parameter of every command that takes a path takes it as ``GivenPath`` (so an empty one is named)."""
    from typer.main import get_command

    from moesim.cli.app import app
    from moesim.cli.options import GivenPath

    def commands(group):
        for command in group.commands.values():
            yield from commands(command) if hasattr(command, "commands") else (command,)  # a group: its own

    paths = [(c.name, p.name) for c in commands(get_command(app)) for p in c.params
             if "path" in type(p.type).__name__.lower() or "path" in getattr(p.type, "name", "")]
    assert len(paths) > 30 and all(isinstance(p.type, GivenPath) for c in commands(get_command(app))
                                   for p in c.params if (c.name, p.name) in paths), paths


def test_a_folder_is_still_a_folder(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert refused(cli, tmp_path, "trace", "info", ".") == ".: a folder, not a trace file"


def test_train_ml_ffn_names_only_its_own_options(cli, tmp_path):
    """A capacity below top-k suggested --semantics sequential, an option 'train ml-ffn' does not take."""
    message = refused(cli, tmp_path, "train", "ml-ffn", "bundled", "--out", tmp_path / "m.npz", "--capacity", "1")
    assert message == ("--capacity 1 is below top_k 2: the validation report's runs keep all k experts of a step "
                       "resident at once; give --capacity 2 or more")
    assert refused(cli, tmp_path, "train", "ml-ffn", "bundled", "--out", tmp_path / "m.npz", "--capacity", "9") == \
        "--capacity 9 is more than the 8 experts per layer"


def test_train_ml_ffn_on_a_top_8_trace_takes_a_capacity_nobody_typed_that_runs(cli, tmp_path, monkeypatch):
    """Untyped, the report's capacity is the trace's top-k (it was 4, refused on an OLMoE trace's top-8 as a --capacity
    nobody typed): training is reached (stood in for here)."""
    import moesim
    from moesim.policies import ml_ffn_train

    olmoe = tmp_path / "olmoe.parquet"
    moesim.write_trace(moesim.synth_trace(16, 64, 8, sequences=2, tokens=8, seed=0, model="olmoe-1b-7b"), olmoe)

    def reached(*args, **kwargs):
        raise MoesimError("training reached")

    monkeypatch.setattr(ml_ffn_train, "train", reached)
    assert refused(cli, tmp_path, "train", "ml-ffn", olmoe, "--out", tmp_path / "m.npz") == "training reached"


def test_a_saved_configuration_starts_the_same_run_from_any_folder(cli, tmp_path, monkeypatch):
    """sim run --save-config wrote the --hardware file as typed (box.toml), relative to the folder the run was in:
    --config sub/c.toml from sub/ (or anywhere else) read sub/box.toml, or none. The files it names are absolute
    now; and a run refused after the configuration was built (a model that does not fit) writes no file."""
    monkeypatch.chdir(tmp_path)
    code, template, _ = cli("hardware", "--template")
    assert code == 0
    (tmp_path / "box.toml").write_text(template)
    (tmp_path / "sub").mkdir()
    run = ("sim", "run", "bundled", "--json")
    assert refused(cli, tmp_path, *run, "--hardware", "box.toml", "--capacity", "4", "--save-config",
                   "sub/c.toml").endswith("the GPU has 12.0 GiB; use --capacity auto, a smaller --dtype or another "
                                          "--strategy (see 'moesim plan')")
    assert not (tmp_path / "sub" / "c.toml").exists()
    code, first, err = cli(*run, "--hardware", "box.toml", "--dtype", "q4_k", "--capacity", "auto", "--ram", "64",
                           "--save-config", "sub/c.toml")
    assert code == 0, err
    saved = Config.from_toml(tmp_path / "sub" / "c.toml")
    assert saved.hardware.machine == os.path.abspath("box.toml")  # the folder as the system names it (a link resolved)
    for folder, config in ((tmp_path / "sub", "c.toml"), (tmp_path, "sub/c.toml"),
                           (tmp_path.parent, tmp_path / "sub" / "c.toml")):
        monkeypatch.chdir(folder)
        code, again, err = cli(*run, "--config", config)
        assert code == 0 and _metrics(again) == _metrics(first), (folder, err)


def _metrics(out):
    """A run's results but its wall time."""
    return [{k: v for k, v in r.items() if k != "seconds"} for r in json.loads(out)["results"]]


def test_to_toml_absolute_names_every_file_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "box.toml").write_text("")  # not read: a name ending .toml is a hardware file
    config = Config.build(hardware="box.toml", arrivals="a.csv", policy="ml-ffn", ml_model="m.npz",
                          prefetch="popular", train_trace="bundled", model="q3/config.json")
    config.to_toml(tmp_path / "c.toml", absolute=True)
    loaded = Config.from_toml(tmp_path / "c.toml")
    here = os.getcwd()  # tmp_path as the system names it (a link resolved)
    assert (loaded.model.name, loaded.hardware.machine, loaded.serve.arrivals, loaded.cache.params) == (
        f"{here}/q3/config.json", f"{here}/box.toml", f"{here}/a.csv", {"ml_model": f"{here}/m.npz"})
    assert loaded.prefetch.params == {"train_trace": "bundled"}  # the shipped trace, wherever the run is
    assert loaded == config.replace(hardware=f"{here}/box.toml", arrivals=f"{here}/a.csv", ml_model=f"{here}/m.npz",
                                    model=f"{here}/q3/config.json")
    assert Config.build(model="mixtral-8x7b").to_toml(tmp_path / "p.toml", absolute=True) is None and \
        Config.from_toml(tmp_path / "p.toml").model.name == "mixtral-8x7b"  # a preset is a name, not a file
    config.to_toml(tmp_path / "plain.toml")  # the API's default: as given
    assert Config.from_toml(tmp_path / "plain.toml") == config


def _sglang(prompt=2, completion=2, **meta):
    """One SGLang /generate response for olmoe-1b-7b (16 layers, top-8 of 64 experts): 8 distinct ids a row."""
    positions, layers = np.ogrid[:prompt + completion - 1, :16]
    ids = ((positions + layers)[..., None] + np.arange(8)) % 64
    return {"text": "...", "meta_info": {"id": "a", "prompt_tokens": prompt, "completion_tokens": completion,
                                         "routed_experts": ids.tolist(), **meta}}


@pytest.mark.parametrize("change, message", [
    (lambda r: r["meta_info"].update(Prompt_tokens=r["meta_info"].pop("prompt_tokens"),
                                     Completion_tokens=r["meta_info"].pop("completion_tokens")),
     ":1: field 'meta_info.Prompt_tokens' is read as 'meta_info.prompt_tokens' only when spelt so (others are "
     "ignored)"),
    (lambda r: r.update(Meta_info=r.pop("meta_info")),
     ":1: field 'Meta_info' is read as 'meta_info' only when spelt so (others are ignored)"),
    (lambda r: r["meta_info"].update(expert_ids_schema={"Num_layers": 16}),
     ":1: field 'expert_ids_schema.Num_layers' is read as 'expert_ids_schema.num_layers' only when spelt so (others "
     "are ignored)"),
])
def test_sglang_refuses_a_misspelt_field_and_ignores_others(cli, tmp_path, change, message):
    """Both token counts misspelt were read as absent: every position a decode step, the prompt lost unsaid."""
    good = _sglang(weight_version="v1", cached_tokens=0)  # other meta_info fields, as SGLang sends them
    src = tmp_path / "responses.jsonl"
    src.write_text(json.dumps(good) + "\n")
    code, _, err = cli("trace", "import", src, "--format", "sglang", "--model", "olmoe-1b-7b", "--out",
                       tmp_path / "t.parquet")
    assert code == 0 and load_trace(tmp_path / "t.parquet").prefill_steps == 2, err
    (tmp_path / "t.parquet").unlink()
    change(good)
    src.write_text(json.dumps(good) + "\n")
    assert refused(cli, tmp_path, "trace", "import", src, "--format", "sglang", "--model", "olmoe-1b-7b", "--out",
                   tmp_path / "t.parquet") == f"{src}{message}"
