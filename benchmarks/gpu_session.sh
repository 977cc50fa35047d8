#!/usr/bin/env bash
# The GPU checks as one prepared command, for a session that is lent a GPU (one device call:
# the tracked tree is under the tool's 64 MiB, tests/test_demo_models.py keeps it there).
#
#     bash benchmarks/gpu_session.sh            # results and logs in $OUT (default /tmp/gpu_session)
#     DEVICE=cpu bash benchmarks/gpu_session.sh # the same steps on a CPU, to try the script
#
# Uses only the machine's own python3 packages (torch, transformers, numpy, pytest, hypothesis;
# no gradio or plotly there). Steps, each under its own timeout, each logged to $OUT/*.log:
#   1. exactness on this device: greedy speculative decoding against target-only decoding,
#      the embedded pair, eager and fast path (CUDA graphs), gamma 4 (python -m app generate);
#   2. the knee of SmolLM2-135M's shape (random weights, app.shapes) and of the shipped
#      SmolLM2 draft, eager and fast, with its c = t_draft(1) / t_target(1) read from them
#      (the flagship's real target is a 98 MB GGUF that cannot travel; its alpha does not
#      depend on the device: demo_models/smollm2_draft/README.md);
#   3. benchmarks/gpu_knee.py: the 1B and 8B shapes, eager and fast, and its goals.
# The steps' timeouts add up to 540 s, inside one device call's 600 (run it with timeout_s=600);
# how long they take on a GPU is not yet measured (nothing here has run on one).
set -u
OUT=${OUT:-/tmp/gpu_session}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
cd "$(dirname "$0")/.."

# LIMIT_X scales every step's time limit (the limits guard a GPU call's budget; the CPU test of
# this script raises them, since a busy 2-core machine is slower, not wrong); KNEE_QS: the knees'
# pass sizes (the CPU test times fewer)
LIMIT_X=${LIMIT_X:-1}
KNEE_QS=${KNEE_QS:-1,2,4,8,16}
step() {  # step NAME SECONDS COMMAND...: run, log to $OUT/NAME.log, record the exit status
    local name=$1 limit=$(( $2 * LIMIT_X ))
    shift 2
    echo "== $name: $*"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc=$?" | tee -a "$OUT/status.txt"
    tail -n 12 "$OUT/$name.log"
}

python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')" | tee "$OUT/env.txt"

EXACT=(python3 -m app generate --pair embedded --device "$DEVICE" --gamma 4 --max-new-tokens 64 --baseline)
PROMPT="It is a truth universally acknowledged"
step exact 60 "${EXACT[@]}" --json "$OUT/exact.json" "$PROMPT"
step exact_fast 90 "${EXACT[@]}" --fast --json "$OUT/exact_fast.json" "$PROMPT"  # compiles once per pass size
step knee_smollm2_shape 120 python3 -m app knee --model smollm2-135m --device "$DEVICE" --fast \
    --qs "$KNEE_QS" --json "$OUT/knee_smollm2_shape.json"
step knee_smollm2_draft 90 python3 -m app knee --model smollm2-draft --device "$DEVICE" --fast \
    --qs "${KNEE_QS%,16}" --json "$OUT/knee_smollm2_draft.json"
if [ "$DEVICE" = cuda ]; then
    step gpu_knee 180 python3 benchmarks/gpu_knee.py --json "$OUT/gpu_knee.json"
fi
python3 - "$OUT" <<'PY' | tee "$OUT/c.txt"
import json, sys  # c = t_draft(1) / t_target(1) at batch 1, eager and fast, from the two knees
out = sys.argv[1]
try:
    knees = [json.load(open(f"{out}/knee_smollm2_{m}.json")) for m in ("draft", "shape")]
except OSError as e:
    sys.exit(f"no c: {e}")
for name, get in (("eager", lambda k: k["rows"]), ("fast", lambda k: k["fast"]["rows"])):
    draft, target = (next(r["seconds"] for r in get(k) if r["batch"] == 1 and r["q"] == 1) for k in knees)
    print(f"c ({name}) = {draft * 1e3:.3f} / {target * 1e3:.3f} ms = {draft / target:.3f}")
PY
grep -h "greedy outputs identical" "$OUT"/exact*.log
cat "$OUT/status.txt"
! grep -qv " rc=0$" "$OUT/status.txt"  # the exit status: 0 only when every step's was
