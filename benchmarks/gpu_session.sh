#!/usr/bin/env bash
# One GPU session's measurements, ready before the GPU is (docs/replay.md, "Where the simulation's excess comes
# from"): whether the executor's overhead that calibration fits on 2 layers (replay/calibrate.py EXECUTOR_LAYERS)
# is what the full model's replays leave. Every step runs under its own timeout, and the limits add up to 590 s, so
# the whole fits one 10-minute call on a lent GPU:
#   1. the machine and the versions;
#   2. the overhead fitted alone on 2 and on 16 layers, alternated (benchmarks/executor_depth.py);
#   3. calibration with the executor's runs on 2 layers, then on 16, each validated on the same trace, fused and
#      per-expert kernels, LRU and Belady at 16 and 32 slots a layer (moesim calibrate, moesim validate);
#   4. attention's first calls at new key counts, the kernels the replay allows (a layer with its context grown).
# The raw output of each step is kept in OUT (default docs/measured/<gpu>-<date>), with each step's exit status in
# OUT/status.txt: a step that fails or runs out of time leaves the others' output.
#
#     bash benchmarks/gpu_session.sh [OUT]
#     BACKEND=cpu SCALE=0.125 LAYERS=4 bash benchmarks/gpu_session.sh /tmp/dry   # the same steps on a CPU, small
set -uo pipefail

BACKEND=${BACKEND:-cuda}
MODEL=${MODEL:-olmoe-1b-7b}
SCALE=${SCALE:-1}
LAYERS=${LAYERS:-}            # keep only the first N MoE layers (a dry run); empty: the whole model
DEPTHS=${DEPTHS:-"2 16"}      # the executor's layers calibration fits its overhead on
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' | tr -cd '[:alnum:]-')
OUT=${1:-docs/measured/${gpu:-$BACKEND}-$(date +%F)}
mkdir -p "$OUT"
: > "$OUT/status.txt"
cut=(--model "$MODEL" --backend "$BACKEND" --scale "$SCALE" ${LAYERS:+--layers "$LAYERS"})

step() {  # step NAME SECONDS COMMAND...: run it, its output to OUT/NAME.log, its status to OUT/status.txt
    local name=$1 seconds=$2
    shift 2
    local start=$SECONDS
    timeout "$seconds" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - start)) s (limit $seconds s)" | tee -a "$OUT/status.txt"
}

step machine 20 bash -c 'nvidia-smi; lscpu | head -20; python -c "import torch, moesim; print(torch.__version__,
torch.version.cuda, moesim.__version__)"; git rev-parse HEAD'
step executor-depth 120 python benchmarks/executor_depth.py --backend "$BACKEND" --model "$MODEL" --scale "$SCALE" \
    --layers "${DEPTHS// /,}" --rounds 3
step trace 20 moesim trace synth --model "$MODEL" --sequences 2 --tokens 24 --seed 0 --out "$OUT/trace.parquet"
for depth in $DEPTHS; do
    # calibrate's executor runs on DEPTH layers: the constant moesim.replay.calibrate reads, set for this process
    step "calibrate-$depth" 110 python -c '
import sys
import moesim.replay.calibrate as calibration
from moesim.cli.app import app
calibration.EXECUTOR_LAYERS = int(sys.argv[1])
app(sys.argv[2:], prog_name="moesim")' "$depth" calibrate "${cut[@]}" --out "$OUT/calibrated-$depth.toml" --force
    for kernel in fused per-expert; do
        step "validate-$depth-$kernel" 45 moesim validate "$OUT/trace.parquet" "${cut[@]}" \
            --hardware "$OUT/calibrated-$depth.toml" --policies lru,belady --capacity 16,32 --kernel "$kernel" --json
    done
done
if [ "$BACKEND" = cuda ]; then
    step attention-first-calls 30 python benchmarks/attention_first_calls.py --model "$MODEL"
else
    step attention-first-calls 30 python benchmarks/attention_first_calls.py --model "$MODEL" --device cpu --calls 4
fi
