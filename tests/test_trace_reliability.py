"""trace record and trace import as a new user meets them: a sampling setting greedy decoding never reads is refused,
and a bad field of a routing log is named as the log spells it."""

import json

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.tracegen.record import RecordOptions

GREEDY = "decoding is greedy at --temperature 0 (the default), so nothing reads"


def refused(cli, tmp_path, *args) -> str:
    """The one line a command that writes ``tmp_path / 'out.parquet'`` is refused with; it leaves nothing behind."""
    before = set(tmp_path.iterdir())
    code, _, err = cli(*args, "--out", tmp_path / "out.parquet")
    assert code == 1 and err.count("\n") == 1, (code, err)
    assert set(tmp_path.iterdir()) == before  # no output, no parts or spill folder
    return err.removeprefix("moesim: error: ").rstrip("\n")


@pytest.mark.parametrize("args, message", [
    (["--top-p", "0.9"], f"--top-p: {GREEDY} it"),
    (["--seed", "3"], f"--seed: {GREEDY} it"),
    (["--temperature", "0", "--top-p", "0.9", "--seed", "3"], f"--top-p, --seed: {GREEDY} them"),
])
def test_record_refuses_top_p_and_seed_when_greedy(cli, tmp_path, monkeypatch, args, message):
    """Greedy decoding samples nothing, so a typed --top-p or --seed changed nothing in the trace: refused before any
    model is loaded."""
    from moesim.tracegen import record

    monkeypatch.setattr(record, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    assert refused(cli, tmp_path, "trace", "record", "--model", "tiny-olmoe", "--prompts", prompts, *args) == message


def test_record_options_refuse_top_p_and_seed_when_greedy():
    for options, message in ((dict(top_p=0.9), "top_p: "), (dict(seed=0), "seed: "),
                             (dict(temperature=0.0, top_p=1.0, seed=3), "top_p, seed: ")):
        with pytest.raises(MoesimError) as err:
            RecordOptions(**options)
        assert str(err.value).startswith(message + "decoding is greedy at temperature=0 (the default), so nothing "
                                                   "reads"), err.value
    RecordOptions(temperature=0.7, top_p=0.9, seed=3)  # sampling reads both


def test_sampling_defaults_are_top_p_1_and_seed_0(cli, tmp_path):
    """Left out when sampling, --top-p and --seed are 1 and 0: the same trace as typing them."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from moesim.tracegen.io import load_trace

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The quick brown fox\n")
    common = ["trace", "record", "--model", "tiny-olmoe", "--prompts", prompts, "--max-new-tokens", "6",
              "--temperature", "1.5"]
    for name, extra in (("default", []), ("typed", ["--top-p", "1", "--seed", "0"])):
        code, _, err = cli(*common, *extra, "--out", tmp_path / f"{name}.parquet")
        assert code == 0, err
    a, b = load_trace(tmp_path / "default.parquet"), load_trace(tmp_path / "typed.parquet")
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.experts, b.experts)


def _log(path, records, edit: dict, lines=(2,)):
    """A vLLM routing log of ``records``, the ``lines`` (1-based) updated with ``edit``."""
    for line in lines:
        records[line - 1].update(edit)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _records(tokens=2, layers=2):
    return [{"dataset": "d", "problem_id": 0, "layer": layer, "experts": [0, 1], "gating_probs": [0.75, 0.25],
             "token_idx": t} for t in range(tokens) for layer in range(layers)]


@pytest.mark.parametrize("edit, lines, message", [
    # these named the trace's column 'weights', a field no log has
    ({"gating_probs": [0.5, 0.25, 0.25]}, (2,), "line 2: 'gating_probs' has 3 values, expected 2"),
    ({"gating_probs": []}, (2,), "line 2: 'gating_probs' has 0 values, expected 2"),
    ({"gating_probs": [0.75, -0.25]}, (2,), "line 2 (seq 0, step 0, layer 1): gating_probs value -0.25 is not a "
                                            "gate weight >= 0"),
    # a null in the list read as NaN: 'weights NaN in 1 of its 2 values'
    ({"gating_probs": [0.75, None]}, (2,), ":2: 'gating_probs' is [0.75, null], not a list of numbers"),
    # a boolean got polars' words for the whole batch: 'lines 1-4: cannot parse 'true' (bool) as f64'
    ({"gating_probs": [True, 0.25]}, (2,), ":2: 'gating_probs' is [true, 0.25], not a list of numbers"),
    # Python's spelling of the value, not the file's: 'is ['a', 0.25]'
    ({"gating_probs": ["a", 0.25]}, (2,), ''':2: 'gating_probs' is ["a", 0.25], not a list of numbers'''),
    # a null expert became expert 0 (with a RuntimeWarning): 'expert 0 selected twice'
    ({"experts": [0, None]}, (2,), ":2: 'experts' is [0, null], not a list of integers"),
    # the trace's column for the field it came from: "line 3: 'step' value 4294967296 is not Int32"
    ({"token_idx": 2 ** 32}, (3, 4), "line 3: 'token_idx' value 4294967296 is not Int32"),
    ({"token_idx": None, "token_pos": 2 ** 32}, (3, 4), "line 3: 'token_pos' value 4294967296 is not Int32"),
])
def test_vllm_log_errors_name_the_field_as_the_log_does(cli, tmp_path, edit, lines, message):
    src = _log(tmp_path / "log.jsonl", _records(), edit, lines)
    assert refused(cli, tmp_path, "trace", "import", src) == f"{src}{'' if message[0] == ':' else ': '}{message}"


def test_a_token_pos_beside_a_token_idx_is_not_read(cli, tmp_path):
    src = _log(tmp_path / "log.jsonl", _records(), {"token_pos": 2 ** 32}, (3, 4))
    code, _, err = cli("trace", "import", src, "--out", tmp_path / "t.parquet")
    assert code == 0 and (tmp_path / "t.parquet").is_file(), err


def test_csv_expert_errors_name_the_column(cli, tmp_path):
    """A table's experts are columns e0..ek-1: the error named the trace's list column 'experts' and showed the row's
    list ("'experts' value [0, 40000] is not List(Int16)")."""
    src = tmp_path / "t.csv"
    src.write_text("seq,step,layer,e0,e1\n" + "".join(f"0,0,{layer},0,{40000 if layer == 3 else 1}\n"
                                                      for layer in range(32)))
    assert refused(cli, tmp_path, "trace", "import", src, "--format", "csv", "--model", "mixtral-8x7b") == \
        f"{src}: line 5: 'e1' value 40000 is not Int16"
