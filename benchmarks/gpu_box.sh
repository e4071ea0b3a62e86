#!/usr/bin/env bash
# The shipped Pong config on a GPU box: raw emulator speed, 3 minutes of training, the limits.
#
# For a bare GPU machine with PyTorch and CUDA but no Ray and no internet: gymnasium,
# farama-notifications and ale-py come along as wheels (WHEELS, default .whl/; download them
# elsewhere for the box's Python, as /work/.library/device/README.md shows), and the project
# runs from PYTHONPATH. It plans within BUDGET_SECONDS (540: 9 minutes, what fits a 15-minute
# device lease beside the machine's start): the required parts come first, and each optional
# part starts only when its estimate fits in what is left (a line says what was skipped), so
# only a part that runs past its estimate passes the budget (a timeout around the call is the
# hard stop); every part's heading carries the seconds since the start. In order, the most telling first, so
# that a run stopped early still has them:
#   * the box: GPU, CPU cores, torch;
#   * raw AtariVectorEnv frames/s (random actions, the v5 protocol) with 16, 64 and 128 envs
#     on every core;
#   * configs/pong_appo.yaml trained for TRAIN_SECONDS (180) with its defaults (evaluation
#     off, so the cores all train): frames/s over the run and after warm-up, seconds to the
#     first env step, the `rltrain plot --marks -15 0 10 18` table, the last status line (its
#     `time:` shares are perf/time), and GPU busy % and memory sampled by nvidia-smi;
#   * the three limits apart (Sample Factory's way), beside the whole run above: sampling
#     alone, the actors with no learner (benchmarks/pong_sampling.py: their own policies,
#     then the policy worker on the GPU) against raw; the learner alone,
#     benchmarks/learner_step.py on the GPU (the learner's update on synthetic Pong rollouts
#     against a plain PyTorch loop there, host syncs counted). And benchmarks/act_latency.py:
#     an actor's act round trip through the policy worker's shared slots (on the CPU);
#   * the same run for ANCHOR_SECONDS (45; 0 skips it) with the protocol of the published
#     fast Pong results (--set env.sticky_actions=0, the v4 ids' protocol), for a comparison
#     on equal terms;
#   then, while the budget allows:
#   * the learner alone and the whole run for WIDE_SECONDS (45; 0 skips it) with
#     WIDE_ENVS (64) envs per actor: larger minibatches for the same kernel launches;
#   * the learner alone and the whole run for MB8_SECONDS (60; 0 skips it) with 8 minibatches
#     of 128 (--set ppo.minibatches=8): twice the learner's updates per frame, the setting
#     that learned faster per frame over three seeds (docs/pong.md, "Three seeds"); its
#     frames/s here decides the shipped default;
#   * on a GPU, with MICRO=1 (0, the default, skips them): benchmarks/exchange.py (a push to
#     the shard beside the learner against optimizer.step()) and benchmarks/cnn_precision.py
#     (fp32/TF32, bf16, channels-last; the Nature CNN and IMPALA's, model.kind=impala_cnn);
#   * the same for BEFORE_SECONDS (0 skips it, the default) with the layout before session 28
#     (each actor's own policy on its CPU, the shard on the CPU);
#   * on a GPU, within COMPILE_SECONDS (0, the default, skips it; 60 is enough): torch.compile
#     and CUDA graphs (mode="reduce-overhead") against bf16 autocast for the CNN, then the
#     learner with model.compile beside the eager one (learner_step.py --compile), each
#     within COMPILE_SECONDS.
#
#   bash benchmarks/gpu_box.sh [extra --set for the run ...]
#   WHEELS=.whl BUDGET_SECONDS=540 TRAIN_SECONDS=180 RAW_SECONDS=3 ANCHOR_SECONDS=45 \
#       WIDE_SECONDS=45 WIDE_ENVS=64 MB8_SECONDS=60 BEFORE_SECONDS=0 MICRO=0 COMPILE_SECONDS=0 \
#       OUT_DIR=/tmp/gpu_box bash benchmarks/gpu_box.sh
set -uo pipefail
T0=$(date +%s)  # the budget counts from here, the wheels' install included
REPO=$(cd "$(dirname "$0")/.." && pwd)
WHEELS=${WHEELS:-$REPO/.whl}
BUDGET_SECONDS=${BUDGET_SECONDS:-540}
TRAIN_SECONDS=${TRAIN_SECONDS:-180}
RAW_SECONDS=${RAW_SECONDS:-3}
OUT_DIR=${OUT_DIR:-/tmp/gpu_box}
CONFIG=${CONFIG:-$REPO/configs/pong_appo.yaml}
ANCHOR_SECONDS=${ANCHOR_SECONDS:-45}
BEFORE_SECONDS=${BEFORE_SECONDS:-0}
COMPILE_SECONDS=${COMPILE_SECONDS:-0}
MICRO=${MICRO:-0}
WIDE_SECONDS=${WIDE_SECONDS:-45}
WIDE_ENVS=${WIDE_ENVS:-64}
MB8_SECONDS=${MB8_SECONDS:-60}
rm -rf "$OUT_DIR" && mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1

if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$REPO:$REPO/benchmarks
else
    export PYTHONPATH=$REPO:$REPO/benchmarks:${PYTHONPATH:-}
fi
rltrain() { python3 -c "from rltrain.cli import entry; entry()" "$@"; }
elapsed() { echo $(($(date +%s) - T0)); }
# part TITLE: a part's heading, with the seconds since the start
part() { echo; echo "## $* [$(elapsed) s]"; }
# fits NAME SECONDS: whether an optional part estimated at SECONDS fits in the budget left
fits() {
    local left=$((BUDGET_SECONDS - $(elapsed)))
    [ "$2" -le "$left" ] && return 0
    echo; echo "## $1 skipped: about $2 s, $left s left of BUDGET_SECONDS=$BUDGET_SECONDS"
    return 1
}
# estimates for the optional parts: a run's seconds beyond its stop.max_seconds (start-up:
# 13.8 s at 16 envs per actor on session 34's H200, 31.8 s at 64; the end and the figures),
# and a learner_step.py call on the GPU
RUN_EXTRA=40
LEARNER_STEP=25

part "the box"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "no nvidia-smi: no GPU figures"
echo "cores: $(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')," \
    "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')"
python3 -c "import torch, ale_py, gymnasium; print(f'torch {torch.__version__}, cuda \
{torch.cuda.is_available()}, ale-py {ale_py.__version__}, gymnasium {gymnasium.__version__}')" \
    || exit 1

part "raw AtariVectorEnv, Pong, random actions, ${RAW_SECONDS}s each"
python3 - "$RAW_SECONDS" <<'EOF'
import os, sys
from pong_sampling import raw_fps
cores = len(os.sched_getaffinity(0))
for n in (16, 64, 128):
    print(f"{n:4d} envs, {cores} threads: {raw_fps(n, cores, float(sys.argv[1])):9,.0f} frames/s")
EOF

# train NAME SECONDS [--set ...]: one run of $CONFIG, then its figures
train() {
    local name=$1 seconds=$2
    shift 2
    part "$(basename "$CONFIG"), ${seconds}s, $name $*"
    local run=$OUT_DIR/$name gpu_log=$OUT_DIR/$name.gpu.csv smi=""
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -l 5 \
            >"$gpu_log" 2>/dev/null &
        smi=$!
    fi
    local start end code
    start=$(date +%s.%N)
    rltrain train "$CONFIG" --run-dir "$run" --set "stop.max_seconds=$seconds" \
        --set stop.mean_return=null --set eval.every_steps=0 "$@" >"$OUT_DIR/$name.log" 2>&1
    code=$?
    end=$(date +%s.%N)
    [ -n "$smi" ] && kill "$smi" 2>/dev/null
    grep -v '^\[train\]' "$OUT_DIR/$name.log" | head -4
    grep '^stopped by' "$OUT_DIR/$name.log" | tail -1
    echo "exit code $code, $(python3 -c "print(f'{$end - $start:.0f}')") s from the command to the end"
    echo "last status: $(grep '^\[train\]' "$OUT_DIR/$name.log" | tail -1)"
    python3 - "$run" "$gpu_log" <<'PY'
import json, sys
from pathlib import Path
from pong_training_fps import steady_fps

run, gpu = Path(sys.argv[1]), Path(sys.argv[2])
s = json.loads((run / "summary.json").read_text())
frames = s["env_frames"]
skip = max(1, round(frames / max(s["env_steps"], 1)))  # frames per env step
print(f"frames: {frames:,} in {s['wall_seconds']:.0f}s: {frames / s['wall_seconds']:,.0f} frames/s "
      f"over the run")
try:
    fps, _ = steady_fps(run / "tb", skip, 30.0)
    print(f"after 30 s of warm-up: {fps:,.0f} frames/s")
except Exception as e:  # noqa: BLE001 - a run too short for it
    print(f"after warm-up: not measured ({e})")
marks = s.get("startup", {})
print("seconds from the command: " + ", ".join(f"{k} {v:.1f}" for k, v in marks.items()))
if gpu.exists() and gpu.read_text().strip():
    rows = [list(map(float, r.split(","))) for r in gpu.read_text().split("\n") if r.strip()]
    busy = [r[0] for r in rows[2:]] or [r[0] for r in rows]  # from 10 s in: training
    print(f"GPU busy (nvidia-smi every 5 s, {len(busy)} samples): mean {sum(busy) / len(busy):.0f}%"
          f", max {max(busy):.0f}%; memory used up to {max(r[1] for r in rows):,.0f} MiB")
PY
}

train defaults "$TRAIN_SECONDS" "$@"
echo
rltrain plot "$OUT_DIR/defaults" --marks -15 0 10 18 --out "$OUT_DIR/curve.png" 2>&1 | tail -8
part "sampling alone: actors (16 envs each, one per core but one) and no learner; each"
echo "## actor's own policy on its CPU, then the policy worker on the GPU (runtime.inference)"
DEVICE=$(python3 -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
ACTORS=$(python3 -c "import os; print(max(1, len(os.sched_getaffinity(0)) - 1))")
python3 "$REPO/benchmarks/pong_sampling.py" --actors "$ACTORS" --envs-per-actor 16 \
    --seconds "$RAW_SECONDS" --inference actor server --device "$DEVICE" | tail -3

part "the learner alone: its update against a plain PyTorch loop, synthetic Pong rollouts"
python3 "$REPO/benchmarks/learner_step.py" --config "$CONFIG" --rollouts 3 --repeats 3
part "one actor's act round trip through the policy worker (process runtime, CPU)"
python3 "$REPO/benchmarks/act_latency.py" --steps 500 | tail -8

if [ "$ANCHOR_SECONDS" -gt 0 ]; then
    # the protocol of rl_games', CleanRL's envpool and most fast-Pong figures: no sticky actions
    train anchors "$ANCHOR_SECONDS" --set env.sticky_actions=0 "$@"
fi

if [ "$WIDE_SECONDS" -gt 0 ] && fits wide $((WIDE_SECONDS + RUN_EXTRA + 20 + LEARNER_STEP)); then
    # more envs per actor: minibatches of 4x the samples for about the same kernel launches
    # (session 34's H200: 29.9k -> 68.9k frames/s after warm-up at 64 envs per actor)
    part "the learner alone with ${WIDE_ENVS} envs per rollout (larger minibatches)"
    python3 "$REPO/benchmarks/learner_step.py" --config "$CONFIG" --rollouts 2 --repeats 3 \
        --set "env.num_envs=$WIDE_ENVS" | tail -1
    train wide "$WIDE_SECONDS" --set "env.num_envs=$WIDE_ENVS" "$@"
fi

if [ "$MB8_SECONDS" -gt 0 ] && fits minibatches8 $((MB8_SECONDS + RUN_EXTRA + LEARNER_STEP)); then
    # 8 minibatches of 128: twice the updates per frame, more points per frame on Pong-v5
    # (docs/pong.md): what they cost where the learner's update is bound by kernel launches
    part "the learner alone with 8 minibatches of 128"
    python3 "$REPO/benchmarks/learner_step.py" --config "$CONFIG" --rollouts 2 --repeats 3 \
        --set ppo.minibatches=8 | tail -1
    train minibatches8 "$MB8_SECONDS" --set ppo.minibatches=8 "$@"
fi

if [ "$MICRO" = 1 ] && fits micro 60 && python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    part "a push to the shard beside the learner against optimizer.step(), on the GPU"
    python3 "$REPO/benchmarks/exchange.py" --configs "$CONFIG" --steps 100 --repeats 3
    part "the Nature and IMPALA CNNs on the GPU (learners: fp32 in TF32, or bf16 autocast)"
    python3 "$REPO/benchmarks/cnn_precision.py" --device cuda --infer-batch 128 --seconds 1 \
        --rounds 2 --models nature_cnn impala_cnn
fi

if [ "$BEFORE_SECONDS" -gt 0 ] && fits before $((BEFORE_SECONDS + RUN_EXTRA)); then
    # the layout before session 28: each actor its own copy of the policy on its CPU, the
    # shard on the CPU (the learner's gradient to the host, Adam there, parameters back)
    train before "$BEFORE_SECONDS" --set runtime.inference=actor --set server.device=cpu "$@"
fi
if [ "$COMPILE_SECONDS" -gt 0 ] && fits compile $((2 * COMPILE_SECONDS)) && python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    part "torch.compile and CUDA graphs on the GPU (at most ${COMPILE_SECONDS}s, compiling included)"
    timeout "$COMPILE_SECONDS" python3 "$REPO/benchmarks/cnn_precision.py" --device cuda \
        --infer-batch 128 --seconds 1 --rounds 1 --variants bf16 compile+bf16 graphs+bf16 \
        || echo "(stopped at ${COMPILE_SECONDS}s)"
    echo "## the learner with model.compile (its minibatch step compiled) beside the eager one"
    timeout "$COMPILE_SECONDS" python3 "$REPO/benchmarks/learner_step.py" --config "$CONFIG" \
        --rollouts 2 --repeats 3 --compile || echo "(stopped at ${COMPILE_SECONDS}s)"
fi

part "done (BUDGET_SECONDS=$BUDGET_SECONDS)"
