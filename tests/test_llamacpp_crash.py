"""llama.cpp cannot take moesim down (moesim.replay.llamacpp_run): every call runs in a child process, and a child that
dies (a signal, as a build's faulting AMX kernels or an instruction the CPU lacks), exits or stops answering is one line
naming the step, the file and what to do; the child is reaped, and a calibration or validation exits 1 with its scratch
removed and nothing written. A stand-in worker (fake_llamacpp_worker.py) dies on purpose, so no faulting machine is
needed."""

import sys
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.replay import llamacpp_run
from moesim.replay.llamacpp_run import LlamaCpp
from moesim.replay.llamacpp_worker import install_line

FAKE = str(Path(__file__).parent / "fake_llamacpp_worker.py")
AMX_BUILD = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | OPENMP = 1 | REPACK = 1 |"
AVX2_BUILD = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | OPENMP = 1 | REPACK = 1 |"


def fake(how: str, step: str, info: str = AMX_BUILD) -> tuple:
    return (sys.executable, FAKE, how, step, info)


def crash(engine: LlamaCpp, call) -> str:
    with pytest.raises(MoesimError) as err:
        call(engine)
    assert "\n" not in str(err.value)
    assert engine.proc is None  # the child was reaped, and the next call starts another
    return str(err.value)


@pytest.mark.parametrize("how, signal_name", [("SIGILL", "SIGILL"), ("SIGSEGV", "SIGSEGV")])
def test_an_amx_build_that_faults_is_one_line_naming_the_step_the_signal_and_the_reinstall(how, signal_name):
    with LlamaCpp(command=fake(how, "prefill")) as engine:
        message = crash(engine, lambda e: e.prefill_tok_s("/models/m.gguf", 1, 32))
    assert message == (f"llama.cpp crashed ({signal_name}) in prefill of m.gguf: this build's AMX kernels fault on "
                       "this machine (llama.cpp issue #20824); reinstall llama-cpp-python without them (AVX-512 "
                       f"kept): {install_line(reinstall=True)}")


def test_the_reinstall_leaves_amx_out_and_keeps_the_native_build(monkeypatch):
    from moesim.replay import llamacpp_worker

    monkeypatch.setattr(llamacpp_worker.platform, "machine", lambda: "x86_64")
    assert install_line().startswith('CMAKE_ARGS="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS=-mno-amx-int8 '
                                     '-DCMAKE_CXX_FLAGS=-mno-amx-int8" pip install --no-cache-dir')
    monkeypatch.setattr(llamacpp_worker.platform, "machine", lambda: "aarch64")  # gcc there knows no -mno-amx-int8
    assert install_line() == "CMAKE_ARGS=-DGGML_NATIVE=ON pip install --no-cache-dir 'moesim[llamacpp]'"


def test_other_deaths_name_their_cause():
    with LlamaCpp(command=fake("SIGILL", "decode", AVX2_BUILD)) as engine:
        message = crash(engine, lambda e: e.decode_tok_s("m.gguf", 2, tokens=4, runs=1))
    assert message.startswith("llama.cpp crashed (SIGILL) in decode of m.gguf: this build uses an instruction this CPU "
                              "lacks (was it built on another machine?); rebuild it here: CMAKE_ARGS=")
    with LlamaCpp(command=fake("SIGSEGV", "quantize", AVX2_BUILD)) as engine:
        message = crash(engine, lambda e: e.quantize("big-bf16.gguf", "big-q4_k.gguf", "q4_k"))
    assert message.startswith("llama.cpp crashed (SIGSEGV) in quantize of big-bf16.gguf: a fault in llama.cpp or its "
                              "build; rebuild it (CMAKE_ARGS=")
    with LlamaCpp(command=fake("exit", "load", AVX2_BUILD)) as engine:
        message = crash(engine, lambda e: e.decode_tok_s("m.gguf", 1))
    assert message == ("llama.cpp's process ended (exit status 3) in load of m.gguf: RuntimeError: the fake worker "
                       "gave up")


def test_a_kill_or_an_abort_is_not_blamed_on_amx_and_an_abort_shows_its_check():
    """An AMX build killed for memory, or stopped by one of ggml's asserts, is told so, not sent to rebuild; a fault
    as the library loads (a build for another CPU) is named as such."""
    with LlamaCpp(command=fake("SIGKILL", "decode")) as engine:
        message = crash(engine, lambda e: e.decode_tok_s("m.gguf", 1))
    assert message == ("llama.cpp crashed (SIGKILL) in decode of m.gguf: it was killed (out of memory? see dmesg); free "
                       "memory or run smaller models")
    with LlamaCpp(command=fake("SIGABRT", "load")) as engine:
        message = crash(engine, lambda e: e.decode_tok_s("m.gguf", 1))
    assert message == ("llama.cpp crashed (SIGABRT) in load of m.gguf: it stopped on a check of its own (ggml.c:1234: "
                       "GGML_ASSERT(n_tokens > 0) failed)")
    with LlamaCpp(command=fake("SIGILL", "start", AVX2_BUILD)) as engine:
        message = crash(engine, lambda e: e.decode_tok_s("m.gguf", 1))
    assert message.startswith("llama.cpp crashed (SIGILL) as it started: this build uses an instruction this CPU lacks")


def test_a_child_that_cannot_start_is_one_line():
    with pytest.raises(MoesimError, match=r"^cannot start llama.cpp's process \(No such file or directory\)$"):
        LlamaCpp(command=("/nonexistent/python",)).decode_tok_s("m.gguf", 1)


def test_a_child_that_stops_answering_is_stopped_after_the_timeout():
    with LlamaCpp(timeout_s=0.5, command=fake("hang", "decode")) as engine:
        message = crash(engine, lambda e: e.decode_tok_s("m.gguf", 1, context=16))
    assert message == "llama.cpp said nothing for 0.5 s in decode of m.gguf; stopped it"


def test_after_a_crash_the_next_call_starts_a_new_child(tmp_path):
    engine = LlamaCpp(command=fake("SIGSEGV", "decode"))
    crash(engine, lambda e: e.decode_tok_s("m.gguf", 1))
    engine.command = fake("SIGSEGV", "never")
    assert engine.decode_tok_s("m.gguf", 1, runs=3) == [1.0, 1.0, 1.0]
    first = engine.proc
    assert engine.prefill_tok_s("m.gguf", 1, 8, runs=2) == [1.0, 1.0] and engine.proc is first  # one child, reused
    engine.close()
    assert first.returncode is not None and engine.proc is None


def test_without_the_bindings_the_engine_is_one_line():
    hidden = "import sys; sys.modules['llama_cpp'] = None; from moesim.replay.llamacpp_worker import main; main()"
    with LlamaCpp(command=(sys.executable, "-c", hidden)) as engine:
        with pytest.raises(MoesimError) as err:
            engine.decode_tok_s("m.gguf", 1)
    assert str(err.value) == ("llama.cpp's Python bindings do not load (ModuleNotFoundError); install them with "
                              f"{install_line()}")


@pytest.fixture
def crashing_worker(monkeypatch):
    """Every LlamaCpp made while the test runs starts the stand-in, which dies of SIGILL at the probe's first prompt;
    the machine is a preset's CPU (no second or two of measuring this one)."""
    from moesim.sim import hardware

    monkeypatch.setattr(llamacpp_run, "WORKER", fake("SIGILL", "prefill"))
    monkeypatch.setattr(hardware, "this_machine", lambda remeasure=False: hardware.get_hardware("ryzen-7950x"))


def test_calibrate_exits_1_in_one_line_leaving_no_scratch_and_no_file(cli, tmp_path, crashing_worker):
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = cli("calibrate", "--engine", "llama.cpp", "--out", tmp_path / "here.toml", "--threads", "1",
                         "--workdir", work)
    assert code == 1
    assert err.startswith("moesim: error: llama.cpp crashed (SIGILL) in prefill of probe-q8_0.gguf: this build's AMX "
                          "kernels fault on this machine") and err.count("\n") == 1
    assert not (tmp_path / "here.toml").exists() and list(work.iterdir()) == []


def test_validate_exits_1_the_same_way(cli, tmp_path, crashing_worker):
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = cli("validate", "--engine", "llama.cpp", "--hardware", "ryzen-7950x", "--threads", "1",
                         "--workdir", work, "--json")
    assert code == 1 and out == ""
    assert err.startswith("moesim: error: llama.cpp crashed (SIGILL) in prefill of probe-q8_0.gguf") and \
        err.count("\n") == 1
    assert list(work.iterdir()) == []
