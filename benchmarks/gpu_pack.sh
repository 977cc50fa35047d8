#!/usr/bin/env bash
# Packs what benchmarks/gpu_distill.sh needs beside the tracked tree into the two folders its
# two device calls carry, and puts the tree back afterwards. Run here, never on the device.
#
#     bash benchmarks/gpu_pack.sh pack      # .gpu_a/, .gpu_b/, .gpu_c/; the largest model files set aside
#     bash benchmarks/gpu_pack.sh sizes     # what each call would carry, against its 64 MiB
#     bash benchmarks/gpu_pack.sh restore   # the set-aside files back: git status as before
#
# A device call carries the tracked tree plus the `carry` folders, 64 MiB in all; the target's
# GGUF is 98 MB, so it travels in two parts on two calls to the same warm machine:
#   .gpu_a/  gguf.part1 (the first SPLIT bytes)                    -> call 1: carry [".gpu_a"]
#   .gpu_b/  gguf.part2, the wheels of gguf and transformers at     -> call 2: carry [".gpu_b"]
#            requirements' pins (the machine's transformers is older; it reaches no registry),
#            the shared corpus as *.txt.gz
#   .gpu_c/  smollm2_draft/, a copy of the shipped draft           -> only for a run that trains it
#            further (research.distill_gpu --resume): a call of its own before the run's, which
#            copies it out (`cp -r .gpu_c/smollm2_draft /tmp/`), since its 29 MB fit beside neither part
# For both calls the tree must shrink to a few MB, so `pack` moves the four largest tracked
# model files (ASIDE_FILES, 52 MB; nothing the GPU route reads) to $ASIDE; `restore` moves them
# back, and refuses to overwrite. .gitignore keeps .gpu_a/ and .gpu_b/ out of the tree (an
# ignored folder travels only when a call names it in carry).
# Environment: GGUF (default: the installed one), SPLIT (57000000), ASIDE (/tmp/speclab-aside),
# CORPUS (../shared/corpus), WHEELS=skip (no download: tests).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ASIDE=${ASIDE:-/tmp/speclab-aside}
SPLIT=${SPLIT:-57000000}
LIMIT=$((64 * 1024 * 1024))
ASIDE_FILES=(demo_models/smollm2_draft/model.safetensors demo_models/tiny/target/model.safetensors
             demo_models/smollm2_draft/tokenizer.json demo_models/tiny/draft/model.safetensors)

tree_bytes() {  # the tracked files present in the working tree
    { git ls-files -z | xargs -0 stat -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}'
}

sizes() {
    local tree a b c
    tree=$(tree_bytes)
    a=$(du -sb .gpu_a 2>/dev/null | cut -f1 || echo 0)
    b=$(du -sb .gpu_b 2>/dev/null | cut -f1 || echo 0)
    c=$(du -sb .gpu_c 2>/dev/null | cut -f1 || echo 0)
    for call in "1 .gpu_a ${a:-0}" "2 .gpu_b ${b:-0}" "3 .gpu_c ${c:-0}"; do
        set -- $call
        local total=$((tree + $3)) verdict=fits
        [ "$total" -le "$LIMIT" ] || verdict="TOO LARGE"
        echo "call $1: tree $tree + $2 $3 = $total bytes of $LIMIT: $verdict"
    done
}

pack() {
    local gguf=${GGUF:-$("$PY" -c 'from app.gguf import find_smollm2_gguf as f; p = f(); print(p or "")')}
    [ -f "$gguf" ] || { echo "no GGUF (pip install --no-deps -r requirements-flagship.txt, or GGUF=path)"; exit 1; }
    if [ -n "$(ls -A "$ASIDE" 2>/dev/null)" ]; then
        echo "$ASIDE is not empty: restore first"; exit 1
    fi
    mkdir -p .gpu_a .gpu_b "$ASIDE"
    head -c "$SPLIT" "$gguf" >.gpu_a/gguf.part1
    tail -c +"$((SPLIT + 1))" "$gguf" >.gpu_b/gguf.part2
    if [ "${WHEELS:-}" != skip ]; then
        local pins
        pins=$(grep -hE '^(gguf|transformers)==' requirements.txt requirements-flagship.txt)
        "$PY" -m pip download -q --no-deps --only-binary=:all: -d .gpu_b $pins
    fi
    for f in "${CORPUS:-../shared/corpus}"/*.txt; do
        [ -f "$f" ] && gzip -c "$f" >".gpu_b/$(basename "$f").gz"
    done
    rm -rf .gpu_c && mkdir -p .gpu_c && cp -r demo_models/smollm2_draft .gpu_c/  # before it is set aside
    for f in "${ASIDE_FILES[@]}"; do
        mkdir -p "$ASIDE/$(dirname "$f")" && mv "$f" "$ASIDE/$f"
    done
    echo "GGUF_SHA256=$(sha256sum "$gguf" | cut -d' ' -f1)"
    sizes
}

restore() {
    for f in "${ASIDE_FILES[@]}"; do
        if [ -e "$f" ]; then echo "$f exists: not overwritten"; exit 1; fi
    done
    for f in "${ASIDE_FILES[@]}"; do
        mv "$ASIDE/$f" "$f"
    done
    git status --short -- "${ASIDE_FILES[@]}"
    echo "restored ${#ASIDE_FILES[@]} files from $ASIDE"
}

case "${1:-}" in
    pack) pack ;;
    sizes) sizes ;;
    restore) restore ;;
    *) echo "usage: bash benchmarks/gpu_pack.sh pack|sizes|restore"; exit 2 ;;
esac
