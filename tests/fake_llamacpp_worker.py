"""A stand-in for ``moesim.replay.llamacpp_worker`` that fails as a faulting llama.cpp build does (test_llamacpp_crash):
``python fake_llamacpp_worker.py HOW STEP INFO`` answers ``info`` with INFO and, at STEP (``start``: the ``info``
request, as the library loads) of the first request that reaches it, kills itself with the signal HOW (``SIGILL``,
``SIGSEGV``; ``SIGABRT`` after a failed check's line on stderr, as ggml's asserts do), exits with status 3 after a
line on stderr (``exit``), or stops answering (``hang``). Every other step answers as the worker's protocol does; it
dies with its parent, as the worker does."""

import json
import os
import signal
import sys
import time

from moesim.replay.llamacpp_worker import die_with_parent


def fail(how: str) -> None:
    if how == "exit":
        print("Traceback (most recent call last):\nRuntimeError: the fake worker gave up", file=sys.stderr)
        sys.exit(3)
    if how == "hang":
        time.sleep(3600)
    if how == "SIGABRT":
        print("ggml.c:1234: GGML_ASSERT(n_tokens > 0) failed", file=sys.stderr, flush=True)
    os.kill(os.getpid(), getattr(signal, how))


def main():
    die_with_parent()
    how, step, info = sys.argv[1:4]
    for line in sys.stdin:
        request = json.loads(line)
        args = request["args"]
        if request["op"] == "info":
            if step == "start":
                fail(how)
            print(json.dumps({"ok": info}), flush=True)
            continue
        steps = ("quantize",) if request["op"] == "quantize" else \
            ("load",) + ("prefill",) * bool(args["prompt"]) + ("decode",) * bool(args["tokens"])
        for at in steps:
            print(json.dumps({"at": at, "file": os.path.basename(args.get("path") or args["src"])}), flush=True)
            if at == step:
                fail(how)
        if request["op"] == "quantize":
            open(args["dst"], "wb").close()
            print(json.dumps({"ok": args["dst"]}), flush=True)
        else:
            print(json.dumps({"ok": [1.0] * args["runs"]}), flush=True)


if __name__ == "__main__":
    main()
