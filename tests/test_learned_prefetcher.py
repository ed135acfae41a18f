"""The learned prefetcher (``moesim.policies.prefetch.learned``) and its training (``learned_train``): a model that
weighs only the previous token predicts exactly the previous token's experts; trained on a trace whose next layer
follows from the last, it predicts held-out sequences exactly; chunked prediction equals whole; held-out precision
and recall against a count written from their definition; its file reader fuzzed; every refusal one line."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moesim
from moesim.errors import MoesimError
from moesim.policies.prefetch import learned
from moesim.policies.prefetch.learned_train import quality, train

pytest.importorskip("sklearn")


def chained(seed: int = 1, sequences: int = 4, tokens: int = 40):
    """A synthetic trace whose layer l routes each expert of layer l-1 plus one (mod E): the next layer follows from
    the last exactly; layer 0 stays random."""
    t = moesim.synth_trace(4, 8, 2, sequences=sequences, tokens=tokens, seed=seed)
    experts = t.experts.copy()
    for layer in range(1, 4):
        experts[:, layer] = (experts[:, layer - 1] + 1) % 8
    return dataclasses.replace(t, experts=experts, weights=None)


def save(path, coef, intercept, features=0):
    np.savez(path, coef=coef.astype(np.float32), intercept=intercept.astype(np.float32), features=np.int64(features))
    return path


def test_a_model_of_the_previous_token_predicts_the_previous_tokens_experts(tmp_path):
    """Weights 1 from expert j at the previous token to expert j, 0 elsewhere: each layer's k predictions are the
    previous token's k experts of that layer (ascending, ties to the lower id), wherever there is a previous token."""
    t = chained()
    e = 8
    coef = np.zeros((4, e, 2 * e))
    coef[:, np.arange(e), e + np.arange(e)] = 1.0
    pred = learned.predict(t, {"prefetch_model": save(tmp_path / "m.npz", coef, np.zeros((4, e)))})
    starts = set(t.seq_offsets[:-1].tolist())
    for row in range(1, t.num_rows):
        if row not in starts:
            assert (pred[row] == np.sort(t.experts[row - 1], axis=1)).all(), row


def test_trained_on_a_chained_trace_it_predicts_held_out_sequences_exactly():
    """Every expert routed in training (120 tokens a sequence), the regressions find that layer l follows from
    layer l-1 alone: the held-out sequence is predicted exactly from layer 1 on. history, which adds the previous
    token's co-occurrence counts to the layer before's, is pulled off by them."""
    arrays, log = train(chained(tokens=120), val_fraction=0.25)
    assert log["train_sequences"] == [0, 1, 2] and log["val_sequences"] == [3] and log["features"] == "chosen"
    per_layer = log["learned"]["per_layer_precision"]
    assert per_layer[1:] == [1.0, 1.0, 1.0] and log["learned"]["per_layer_recall"][1:] == [1.0, 1.0, 1.0]
    assert arrays["coef"].shape == (4, 8, 16) and arrays["intercept"].shape == (4, 8)
    assert all(p < 0.9 for p in log["history"]["per_layer_precision"][1:])


def test_chunks_predict_what_the_whole_does(tmp_path, monkeypatch):
    """Rows are scored a chunk at a time (memory bounded whatever the trace): chunk edges, sequence starts inside a
    chunk and the last short chunk change nothing."""
    t = chained(sequences=5, tokens=23)
    arrays, _ = train(t, val_fraction=0.2)
    model = {**arrays, "features": "chosen"}
    whole = learned.predictions(t, model)
    monkeypatch.setattr(learned, "CHUNK_ROWS", 7)
    assert (learned.predictions(t, model) == whole).all()


def test_precision_and_recall_from_their_definition():
    """Two decode rows, one layer, k = 2: |P∩R| = 1 + 2, |P| = 2 + 2 (a -1 is no prediction... here none), |R| = 4."""
    t = moesim.synth_trace(1, 4, 2, sequences=1, tokens=2, seed=0)
    t = dataclasses.replace(t, experts=np.array([[[0, 1]], [[2, 3]]], np.int16))
    pred = np.array([[[1, 2]], [[3, 2]]], np.int16)
    precision, recall = quality(pred, t)
    assert precision.tolist() == [0.75] and recall.tolist() == [0.75]
    fewer = np.array([[[1, -1]], [[3, 2]]], np.int16)
    precision, recall = quality(fewer, t)
    assert precision.tolist() == [1.0] and recall.tolist() == [0.75]


def test_a_simulated_run_takes_the_model(tmp_path):
    """Through the discrete-event simulator on the bundled trace: the run's predictions are the model's, so its
    precision over the decode cells is the mean of the per-layer precisions (each layer predicts k a row)."""
    trace = moesim.load_trace(moesim.bundled_trace())
    moesim.train_prefetcher(trace, tmp_path / "p.npz", val_fraction=0.5)
    precision, _ = quality(learned.predict(trace, {"prefetch_model": tmp_path / "p.npz"}), trace)
    run = moesim.simulate(trace, prefetch="learned", prefetch_model=str(tmp_path / "p.npz"), capacity=4, policy="lru",
                          dtype="int4", hardware="rtx4090")
    assert run.prefetch_precision == pytest.approx(precision.mean(), rel=1e-12)


def test_every_refusal_is_one_line(cli, tmp_path):
    code, _, err = cli("sim", "run", "bundled", "--prefetch", "learned", "--capacity", "4", "--dtype", "int4",
                       "--hardware", "rtx4090")
    assert code == 1 and err == ("moesim: error: prefetcher learned needs a model: pass --prefetch-model MODEL.npz "
                                 "(from 'moesim train prefetcher' or moesim.train_prefetcher)\n")
    other = save(tmp_path / "o.npz", np.zeros((4, 8, 16)), np.zeros((4, 8)))
    code, _, err = cli("sim", "run", "bundled", "--prefetch", "learned", "--prefetch-model", other, "--capacity", "4",
                       "--dtype", "int4", "--hardware", "rtx4090")
    assert code == 1 and err == (f"moesim: error: {other}: model is for 4 layers x 8 experts; the trace has 32 x "
                                 "8\n")
    weighted = save(tmp_path / "w.npz", np.zeros((4, 8, 16)), np.zeros((4, 8)), features=1)
    with pytest.raises(MoesimError, match=r"w\.npz: the model learned from gate weights, and the trace does not "
                                          r"record them"):
        learned.predict(chained(), {"prefetch_model": weighted})
    code, _, err = cli("train", "prefetcher", "bundled", "--out", tmp_path / "p.npz", "--val-fraction", "1.5")
    assert code == 1 and err == ("moesim: error: --val-fraction 1.5: the share of sequences held out must be above 0 "
                                 "and below 1\n") and not (tmp_path / "p.npz").exists()


def test_train_prefetcher_on_the_command_line(cli, tmp_path):
    out = tmp_path / "p.npz"
    code, text, err = cli("train", "prefetcher", "bundled", "--out", out, "--val-fraction", "0.5", "--json")
    assert code == 0, err
    report = json.loads(text)
    assert report["val_sequences"] == [1] and report["features"] == "weights"
    for name in ("learned", "history"):
        assert len(report[name]["per_layer_precision"]) == 32 and 0 < report[name]["precision"] < 1
    assert learned.load_model(out)["features"] == "weights"


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ARRAYS = st.sampled_from([np.zeros((2, 3, 6), np.float32), np.zeros((2, 3), np.float32), np.zeros((2, 3, 5)),
                          np.array(np.nan), np.int64(1), np.int64(7), np.zeros((0, 3, 6)), np.array(["a"]),
                          np.full((2, 3, 6), np.inf), np.zeros((2, 3, 6), np.int32)])


@FUZZ
@given(st.dictionaries(st.sampled_from(["coef", "intercept", "features", "other"]), ARRAYS, max_size=4))
def test_the_model_reader_fuzzed(tmp_path, arrays):
    """Whatever arrays the file holds: a checked model, or one line naming the file."""
    path = tmp_path / "m.npz"
    np.savez(path, **arrays)
    try:
        model = learned.load_model(path)
    except MoesimError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    coef = model["coef"]
    assert coef.shape[2] == 2 * coef.shape[1] and model["intercept"].shape == coef.shape[:2]


@pytest.mark.parametrize("blob", [b"", b"not a zip", b"PK\x03\x04broken"])
def test_a_file_that_is_no_model_is_one_line(tmp_path, blob):
    path = tmp_path / "m.npz"
    path.write_bytes(blob)
    with pytest.raises(MoesimError, match=r"not a readable prefetcher model file"):
        learned.load_model(path)


def test_a_pickled_array_is_never_unpickled(tmp_path):
    path = tmp_path / "m.npy"
    buffer = io.BytesIO()
    np.save(buffer, np.array([object()], dtype=object), allow_pickle=True)
    path.write_bytes(buffer.getvalue())
    with pytest.raises(MoesimError, match=r"as 'moesim train prefetcher' writes"):
        learned.load_model(path)
