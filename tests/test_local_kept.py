"""``--hardware local`` measures once per machine and keeps it (``moesim.sim.local_kept``): a later process answers
from the same numbers without measuring, ``--remeasure`` measures again, another machine's identity is measured
anew, and a kept file that cannot be trusted is measured over; its reader is fuzzed."""

from __future__ import annotations

import json
import math
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.sim import hardware, local_kept


@pytest.fixture
def measures(monkeypatch, tmp_path):
    """The DRAM read and the clock stubbed (each call counted, each giving the next value of its list), the kept
    folder a fresh one, and the process's machine forgotten before and after."""
    monkeypatch.setenv("MOESIM_CACHE", str(tmp_path))
    calls = {"dram": [], "ghz": []}
    values = {"dram": iter([40.0, 31.0, 27.0]), "ghz": iter([3.5, 3.1, 2.9])}
    monkeypatch.setattr(hardware, "measure_dram_gbps", lambda nbytes: calls["dram"].append(nbytes) or next(values["dram"]))
    monkeypatch.setattr(hardware, "measure_clock_ghz", lambda isa: calls["ghz"].append(isa) or next(values["ghz"]))
    hardware.this_machine.cache_clear()
    yield calls, tmp_path / local_kept.FILE_NAME
    hardware.this_machine.cache_clear()


def _cpu(hw):
    return hw.cpu.dram_gbps * hw.cpu.sockets, hw.cpu.ghz


def test_measured_once_then_kept(measures):
    """The first run measures and files the numbers; a later process (the cache cleared) reads them back and
    measures nothing: the same DRAM rate and clock, its source saying where they are kept."""
    calls, path = measures
    first = hardware.this_machine()
    assert len(calls["dram"]) == 1 and _cpu(first) == pytest.approx((40.0, 3.5))
    assert path.exists() and "kept in" in first.source
    hardware.this_machine.cache_clear()
    second = hardware.this_machine()
    assert len(calls["dram"]) == 1 and len(calls["ghz"]) == 1
    assert _cpu(second) == _cpu(first) and "--remeasure measures again" in second.source


def test_remeasure_replaces_the_kept_numbers(measures):
    calls, path = measures
    hardware.this_machine()
    again = hardware.this_machine(remeasure=True)
    assert len(calls["dram"]) == 2 and _cpu(again) == pytest.approx((31.0, 3.1))
    hardware.this_machine.cache_clear()
    assert _cpu(hardware.this_machine()) == pytest.approx((31.0, 3.1)) and len(calls["dram"]) == 2


def test_another_machine_is_measured_anew(measures, monkeypatch):
    """Entries are filed by identity: a machine whose identity differs (a VM resized) measures, and the first
    machine's entry stays."""
    calls, path = measures
    hardware.this_machine()
    monkeypatch.setattr(local_kept, "identity", lambda read: "another")
    hardware.this_machine.cache_clear()
    assert _cpu(hardware.this_machine()) == pytest.approx((31.0, 3.1)) and len(calls["dram"]) == 2
    assert len(json.loads(path.read_text())) == 2


@pytest.mark.parametrize("text", ["", "{", "[]", '{"KEY": {"dram_gbps": "fast"}}', '{"KEY": {"dram_gbps": NaN}}',
                                  '{"KEY": {"dram_gbps": -3}}', '{"KEY": {"dram_gbps": 9, "ghz": 0}}',
                                  '{"KEY": {"dram_gbps": true}}', '{"KEY": 5}', "\xff\xfe"])
def test_a_kept_file_that_cannot_be_trusted_is_measured_over(measures, monkeypatch, text):
    calls, path = measures
    monkeypatch.setattr(local_kept, "identity", lambda read: "KEY")
    path.write_text(text, errors="surrogateescape")
    hw = hardware.this_machine()
    assert len(calls["dram"]) == 1 and _cpu(hw) == pytest.approx((40.0, 3.5))
    assert local_kept.load(path, "KEY") == (40.0, 3.5, local_kept.load(path, "KEY").measured_at)


def test_an_unwritable_folder_still_answers(measures, monkeypatch, tmp_path):
    """A folder that cannot be made (a file in its place): the numbers serve this process, nothing is kept."""
    calls, _ = measures
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MOESIM_CACHE", str(blocker / "moesim"))
    hw = hardware.this_machine()
    assert _cpu(hw) == pytest.approx((40.0, 3.5)) and "kept in" not in hw.source


def test_a_clock_that_is_not_a_rate_is_kept_as_none(tmp_path):
    path = tmp_path / local_kept.FILE_NAME
    local_kept.keep(path, "K", 12.0, None)
    local_kept.keep(path, "L", 12.0, float("nan"))
    assert local_kept.load(path, "K").ghz is None and local_kept.load(path, "L").ghz is None


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
                              lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner,
                                                                                          max_size=3),
                              max_leaves=10).map(lambda v: json.dumps({"K": v}).encode())))
def test_the_reader_fuzzed(tmp_path, blob):
    """Whatever the file holds: None, or finite positive numbers; never an exception."""
    path = tmp_path / "kept.json"
    path.write_bytes(blob)
    kept = local_kept.load(path, "K")
    assert kept is None or (math.isfinite(kept.dram_gbps) and kept.dram_gbps > 0
                            and (kept.ghz is None or (math.isfinite(kept.ghz) and kept.ghz > 0)))


def test_remeasure_is_refused_without_show_local(cli, measures):
    code, out, err = cli("hardware", "--remeasure")
    assert (code, out, err.strip()) == (1, "", "moesim: error: --remeasure measures this machine again: give --show "
                                                "local")


def test_show_local_remeasure_measures_again(cli, measures):
    calls, _ = measures
    assert cli("hardware", "--show", "local")[0] == 0 and len(calls["dram"]) == 1
    code, out, _ = cli("hardware", "--show", "local", "--remeasure")
    assert code == 0 and len(calls["dram"]) == 2 and "31.0 GB/s" in out
