"""A calibrated machine's own 80% interval (issue 67): ``validate --engine llama.cpp --out`` measures it over llama.cpp
decodes calibration did not run and writes it into the hardware file; ``plan``, ``sim run`` and ``--explain`` give it
there, where a calibrated machine had no interval at all."""

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.replay.llamacpp_calibrate import Measured
from moesim.replay.llamacpp_validate import BAND_ROWS, Row, decode_band
from moesim.sim.accuracy import (OPERATIONS_BANDS, PREFILL_BAND, PREFILL_OPERATIONS_BAND, PROMPT_GROWTH, interval,
                                  ttft_interval)
from moesim.sim.hardware import get_hardware, load_hardware, write_hardware


def rows(ratios, prompts=0):
    """Validation rows whose llama.cpp tokens/s is ``ratio`` times moesim's prediction from the file (100 tok/s)."""
    out = [Row("s", "q8_0", Measured(Path("m.gguf"), 1, 0, [100.0 * r], (30.0, 30.0)), 100.0, 100.0) for r in ratios]
    return out + [Row("s", "q8_0", Measured(Path("m.gguf"), 1, 0, [1e4], (30.0, 30.0), prompt=256), 1.0, 1.0)] * prompts


def calibrated(tmp_path, **band) -> Path:
    """A CPU-only machine that carries a measured rate (as calibration writes), with ``band`` in its [cpu]."""
    hw = get_hardware("ryzen-7950x")
    hw = replace(hw, name="here", cpu=replace(hw.cpu, unpack_gbps=(("q8_0", 10.0),), **band))
    path = tmp_path / "here.toml"
    write_hardware(hw, path, ("moesim calibrate --engine llama.cpp (a test's)",))
    return path


def test_the_band_is_the_decode_ratios_deciles_and_each_left_out_says_if_it_held():
    """Measured / predicted 0.80, 0.82, ..., 1.18 (20 decodes; a prefill row is not a decode): numpy's linear
    quantiles give 0.836 and 1.144; left out in turn, an end falls outside the others' interval, the rest inside."""
    ratios = np.linspace(0.80, 1.18, 20)
    low, high, held = decode_band(rows(ratios, prompts=3))
    assert (low, high) == pytest.approx((0.80 + 0.1 * 19 * 0.02, 0.80 + 0.9 * 19 * 0.02), rel=1e-12)
    inside = [np.quantile(np.delete(ratios, i), 0.1) <= x <= np.quantile(np.delete(ratios, i), 0.9)
              for i, x in enumerate(ratios)]
    assert held == pytest.approx(np.mean(inside)) and 0.5 < held < 1
    with pytest.raises(MoesimError, match=f"at least {BAND_ROWS} decode configurations, this validation ran 9"):
        decode_band(rows(ratios[:9], prompts=5))


def test_a_calibrated_machine_gives_its_own_band_and_none_without_one(tmp_path):
    """The band's factors apply to a calibrated machine's prediction; one without a band has no interval, and a spec
    sheet's machine keeps the published one whatever its file says."""
    hw = load_hardware(calibrated(tmp_path, band_low=0.9, band_high=1.25, band_held=0.8))
    assert hw.cpu.band_low == 0.9 and interval(40.0, hw, False, "CPU") == pytest.approx((36.0, 50.0))
    bare = replace(hw, cpu=replace(hw.cpu, band_low=0.0, band_high=0.0, band_held=0.0))
    assert interval(40.0, bare, True, "CPU") == (None, None)
    sheet = replace(hw, cpu=replace(hw.cpu, unpack_gbps=()))
    for on, (low, high, _) in OPERATIONS_BANDS.items():  # a spec sheet's machine: the published band of the side
        assert interval(40.0, sheet, False, on) == pytest.approx((40 * low, 40 * high))


def test_a_ttft_s_interval_is_its_seconds_over_the_published_prompts_band(tmp_path):
    """A TTFT of 2 s on a spec sheet's machine: 2 / high to 2 / low of ``PREFILL_BAND`` where its prompt time was
    grown as its engine's, of ``PREFILL_OPERATIONS_BAND`` where it is the operations alone (measured / predicted
    prompt tokens/s); none without a TTFT, and none on a calibrated machine (its band is of decodes)."""
    sheet = get_hardware("ryzen-7950x")
    for grown, (low, high, _) in ((True, PREFILL_BAND), (False, PREFILL_OPERATIONS_BAND)):
        assert ttft_interval(2.0, sheet, grown) == pytest.approx((2.0 / high, 2.0 / low), rel=1e-15)
        assert ttft_interval(None, sheet, grown) == (None, None) == ttft_interval(float("nan"), sheet, grown)
        hw = load_hardware(calibrated(tmp_path, band_low=0.9, band_high=1.25, band_held=0.8))
        assert ttft_interval(2.0, hw, grown) == (None, None)


def test_a_ttft_timed_as_its_engine_is_the_prompts_time_grown_on_a_spec_sheet_only(tmp_path):
    """The same prompt timed as llama.cpp (``engine``) and as the placement's operations: x (1 + ``PROMPT_GROWTH``)
    on a spec sheet's machine, x 1 on one that carries measured rates (a calibration measured its prompts), the
    growth each took recorded; decode alike in both."""
    import moesim
    from moesim.tracegen.models import get_model
    from moesim.tracegen.synth import synth_trace

    m = get_model("olmoe-1b-7b")
    trace = synth_trace(m.num_layers, m.num_experts, m.top_k, 2, 4, seed=3, prompt_tokens=64, model=m.name,
                        meta=m.trace_meta())
    for hw, growth in ((get_hardware("ryzen-7950x"), PROMPT_GROWTH),
                       (load_hardware(calibrated(tmp_path, band_low=0.9, band_high=1.25, band_held=0.8)), 0.0)):
        alone, named = (moesim.simulate(trace, model=m, hardware=hw, dtype="q8_0", strategy="cpu-experts", warmup=1,
                                        engine=engine) for engine in ("auto", "llama.cpp"))
        assert named.ttft_s == pytest.approx(alone.ttft_s * (1 + growth), rel=1e-12) and alone.ttft_s > 0
        assert (named.prompt_growth, alone.prompt_growth) == (growth, 0.0)
        assert named.tpot_s == pytest.approx(alone.tpot_s, rel=1e-12)


@pytest.mark.parametrize("key, value", [("band_low", -0.5), ("band_high", 1e9), ("band_held", 2.0)])
def test_a_band_out_of_its_range_is_refused_in_one_line(tmp_path, key, value):
    path = calibrated(tmp_path)
    path.write_text(re.sub(rf"^{key} = .*$", f"{key} = {value}", path.read_text(), flags=re.M))
    with pytest.raises(MoesimError, match=f"{path}: \\[cpu\\] {key} "):
        load_hardware(path)


def test_validate_out_writes_the_band_where_plan_and_sim_run_give_it(cli, tmp_path, monkeypatch):
    """``validate --engine llama.cpp --hardware here.toml --out band.toml`` (llama.cpp's runs stood in for): the file
    it writes is here.toml, its notes kept, with the band; ``plan`` on it gives each row that interval and says whose
    it is; ``--out`` on a spec sheet's machine, or onto the file it reads, is refused in one line before any run."""
    from moesim.replay import llamacpp_validate
    from moesim.tracegen.trace import bundled_trace_path

    ratios = np.linspace(0.9, 1.3, 12)
    monkeypatch.setattr(llamacpp_validate, "validate_llamacpp", lambda *args, **kwargs: rows(ratios, prompts=2))
    here, out = calibrated(tmp_path), tmp_path / "band.toml"
    code, text, err = cli("validate", "--engine", "llama.cpp", "--hardware", here, "--threads", "1", "--out", out,
                          "--json")
    assert code == 0, err
    low, high, held = decode_band(rows(ratios))
    assert json.loads(text)["summary"]["band"] == pytest.approx({"low": low, "high": high, "held": held})
    cpu = load_hardware(out).cpu
    assert (cpu.band_low, cpu.band_high, cpu.band_held) == pytest.approx((low, high, held))
    assert "# moesim calibrate --engine llama.cpp (a test's)" in out.read_text()
    again = tmp_path / "again.toml"  # validated again from the banded file: its note once, the new band's
    assert cli("validate", "--engine", "llama.cpp", "--hardware", out, "--threads", "1", "--out", again)[0] == 0
    assert again.read_text().count("this machine's 80% decode interval") == 1
    code, text, err = cli("plan", "--model", "olmoe-1b-7b", "--hardware", out, "--dtype", "q8_0", "--json")
    assert code == 0, err
    row = json.loads(text)["rows"][0]
    assert (row["tokens_per_s_low"], row["tokens_per_s_high"]) == pytest.approx(
        (row["tokens_per_s"] * low, row["tokens_per_s"] * high), rel=1e-12)
    code, text, err = cli("sim", "run", bundled_trace_path(), "--model", "mixtral-8x7b", "--hardware", out, "--dtype",
                          "q8_0")
    assert code == 0 and "this machine's own" in " ".join(text.split()), err
    code, _, err = cli("validate", "--engine", "llama.cpp", "--hardware", here, "--out", here)
    assert code == 1 and "is also an input of this command" in err
    code, _, err = cli("validate", "--engine", "llama.cpp", "--hardware", "ryzen-7950x", "--out", tmp_path / "x.toml")
    assert code == 1 and err.count("\n") == 1 and "a spec sheet's machine" in err
    monkeypatch.setattr(llamacpp_validate, "validate_llamacpp", lambda *args, **kwargs: pytest.fail("it ran"))
    code, _, err = cli("validate", "--engine", "llama.cpp", "--hardware", here, "--threads", "1", "--dtype", "q8_0",
                       "--out", tmp_path / "y.toml")  # 3 shapes x 1 format x 1 thread count x 1 context: 3 decodes
    assert code == 1 and "at least 10 decode configurations, these options give 3" in err
