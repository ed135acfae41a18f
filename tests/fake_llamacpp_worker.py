"""A stand-in for ``moesim.replay.llamacpp_worker`` that fails as a faulting llama.cpp build does (test_llamacpp_crash):
``python fake_llamacpp_worker.py HOW STEP INFO`` answers ``info`` with INFO and, at STEP of the first request that
reaches it, kills itself with the signal HOW (``SIGILL``, ``SIGSEGV``), exits with status 3 after a line on stderr
(``exit``), or stops answering (``hang``). Every other step answers as the worker's protocol does."""

import json
import os
import signal
import sys
import time


def main():
    how, step, info = sys.argv[1:4]
    for line in sys.stdin:
        request = json.loads(line)
        args = request["args"]
        if request["op"] == "info":
            print(json.dumps({"ok": info}), flush=True)
            continue
        steps = ("quantize",) if request["op"] == "quantize" else \
            ("load",) + ("prefill",) * bool(args["prompt"]) + ("decode",) * bool(args["tokens"])
        for at in steps:
            print(json.dumps({"at": at, "file": os.path.basename(args.get("path") or args["src"])}), flush=True)
            if at == step:
                if how == "exit":
                    print("Traceback (most recent call last):\nRuntimeError: the fake worker gave up", file=sys.stderr)
                    sys.exit(3)
                if how == "hang":
                    time.sleep(3600)
                os.kill(os.getpid(), getattr(signal, how))
        if request["op"] == "quantize":
            open(args["dst"], "wb").close()
            print(json.dumps({"ok": args["dst"]}), flush=True)
        else:
            print(json.dumps({"ok": [1.0] * args["runs"]}), flush=True)


if __name__ == "__main__":
    main()
