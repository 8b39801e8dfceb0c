#!/usr/bin/env bash
# The whole GPU check in one script: the `cuda` tests (decode/forward log-prob parity, CPU vs CUDA, one step of each
# algorithm, every recipe's RL stage with its evaluation at the Qwen2.5-3B shape in bf16 mixed precision, SFT, a
# Qwen2.5-7B LoRA step) and the GRPO step against TRL on the same GPU, then gpu_check.{json,md}.
#
#   bash benchmarks/gpu_check.sh --prepare     # on a machine with pip and ../shared: wheels -> .whl/, tokenizer -> .gpu/
#   bash benchmarks/gpu_check.sh [OUT_DIR]     # on the GPU machine (torch with CUDA preinstalled, no registry needed)
#
# PHASES picks phases ("tests peer rollout", the default, all three; e.g. PHASES=peer). CUDA_TESTS_K selects tests
# (pytest -k, e.g. "ppo or recipe"), CUDA_TESTS_ARGS adds pytest arguments, PEER_ARGS / ROLLOUT_ARGS the benchmarks'
# (e.g. "--shapes qwen2.5-1.5b"), PEER_STEPS the peer's steps (4: with compiled decoding on, the median then leaves
# out a step that recompiles for new prompt lengths). Each phase has a timeout: CUDA_TESTS_TIMEOUT 420 s (pytest is
# interrupted, so it still writes the JUnit XML of the tests that finished), PEER_TIMEOUT 240 s, ROLLOUT_TIMEOUT
# 120 s, and PYTEST_TIMEOUT 150 s a test. Together they exceed one 10-minute command: give each command the phases
# that fit. OUT_DIR receives gpu_check.{json,md} and gpu_check_logs.tgz (every log, the JUnit XML, per-recipe
# records, nvidia-smi samples).
#
# Measured on one H200: the tests 230-340 s; the TRL pair on 16 prompts x 5 about 140 s at the 1.5B shape and 175 s
# at 3B (on 64 prompts ours alone took ~90 s at 1.5B: give each shape its own command; ours is written before TRL's
# side starts, so a timeout there keeps it; --profile adds a profiled step of ours); the rollout phase ~120 s with
# ROLLOUT_ARGS limited as below. A 15-minute lease (machine start included) fits two commands, carrying .whl and .gpu:
#   1. PHASES=tests bash benchmarks/gpu_check.sh $OUT                                           (timeout_s 480)
#   2. PHASES=rollout ROLLOUT_TIMEOUT=170 ROLLOUT_ARGS="--decode-shapes qwen2.5-1.5b --batches 512 --hf-batches 0
#      --skip-rollout --compile" bash benchmarks/gpu_check.sh $OUT                              (timeout_s 200)
# then here `python benchmarks/gpu_check.py RUN1 RUN2 --onto benchmarks/results/gpu_check.json --results` (each
# gpu_check_logs.tgz unpacked into its own directory) updates the committed report with what these runs measured.
# The GPU machine needs only torch, transformers, accelerate and peft; everything else comes from .whl/ (installed
# into /tmp/site, never into the system). Exit status: 2 without a CUDA device (nothing runs), else non-zero when a
# cuda test failed or a phase did not finish.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=(pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 typing_inspection==0.4.5 fastapi==0.165.0
  starlette==1.10.0 uvicorn==0.54.0 bm25s==0.3.16 PyStemmer==3.1.0 gguf==0.19.0 datasets==5.0.1 dill==0.4.1
  multiprocess==0.70.19 beautifulsoup4==4.15.0 soupsieve==4.1.3 faiss_cpu==1.15.1 trl==1.16.0 typer==0.29.2 click==8.5.1)

if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
  mkdir -p .gpu/tokenizers
  cp -r "${SEARCHRL_SHARED_DATA:-../shared/data}/tokenizers/qwen3" .gpu/tokenizers/
  grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >>.git/info/exclude
  grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >>.git/info/exclude
  du -sh .whl .gpu
  echo "prepared: carry .whl and .gpu to the GPU machine"
  exit 0
fi

# Without a CUDA device every cuda test skips and the report would read as a clean GPU check: stop here instead.
if ! python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check.sh needs a CUDA GPU: python3 sees none (torch.cuda.is_available() is false); run it on the GPU" \
    "machine, or 'bash benchmarks/gpu_check.sh --prepare' here" >&2
  exit 2
fi

OUT_DIR="${1:-${OUT:-runs/gpu_check}}"
mkdir -p "$OUT_DIR" && OUT_DIR="$(cd "$OUT_DIR" && pwd)"
# logs and records go to RUN; OUT_DIR gets the report (gpu_check.{json,md}) and one archive of RUN's logs: three files
RUN="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
START=$(date +%s)
if [[ -z "${NO_WHEELS:-}" ]] && compgen -G ".whl/*.whl" >/dev/null; then  # NO_WHEELS=1: use the installed packages
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH="$PWD/src:/tmp/site"
else
  export PYTHONPATH="$PWD/src"
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false SEARCHRL_NO_PROGRESS=1
export SEARCHRL_SHARED_DATA="${SEARCHRL_SHARED_DATA:-$PWD/.gpu}"
export SEARCHRL_CACHE="${SEARCHRL_CACHE:-/tmp/searchrl-cache}"
export SEARCHRL_GPU_LOG="$RUN/recipes.jsonl"
SHM=/tmp
[[ -d /dev/shm && -w /dev/shm ]] && SHM=/dev/shm
export SEARCHRL_GPU_TMP="$SHM/searchrl-gpu-check"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$RUN/device.txt" 2>&1
python3 -c "import json, torch, transformers; print(json.dumps({'torch': torch.__version__, \
  'transformers': transformers.__version__}))" >"$RUN/versions.json" 2>/dev/null || rm -f "$RUN/versions.json"
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -lms 1000 >"$RUN/smi.csv" 2>/dev/null &
SMI=$!

finish() {
  kill "$SMI" 2>/dev/null
  echo "== report ($(($(date +%s) - START)) s)"
  python3 benchmarks/gpu_check.py "$RUN" --seconds $(($(date +%s) - START))
  cp "$RUN"/gpu_check.json "$RUN"/gpu_check.md "$OUT_DIR"/ 2>/dev/null
  (cd "$RUN" && find . -maxdepth 3 -type f -size -20M \
    \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.xml' -o -name '*.txt' -o -name '*.csv' \) \
    -print0 | tar czf "$OUT_DIR/gpu_check_logs.tgz" --null -T -)
}
trap finish EXIT

status=0
if [[ " ${PHASES:-tests peer rollout} " == *" tests "* ]]; then
  echo "== cuda tests ($(($(date +%s) - START)) s)"
  per_test=()
  python3 -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout "${PYTEST_TIMEOUT:-150}")
  [[ -n "${CUDA_TESTS_K:-}" ]] && per_test+=(-k "$CUDA_TESTS_K")
  # SIGINT, not timeout's TERM: an interrupted pytest still writes the JUnit XML of the tests that finished
  timeout -s INT -k 30 "${CUDA_TESTS_TIMEOUT:-420}" python3 -m pytest -m cuda tests/gpu -q -p no:cacheprovider --durations=0 \
    "${per_test[@]}" ${CUDA_TESTS_ARGS:-} --junitxml="$RUN/cuda_tests.xml" 2>&1 | tee "$RUN/cuda_tests.log" | tail -40
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  rm -rf "$SEARCHRL_GPU_TMP"
fi

if [[ " ${PHASES:-tests peer rollout} " == *" peer "* ]]; then
  echo "== GRPO step vs TRL ($(($(date +%s) - START)) s)"
  timeout "${PEER_TIMEOUT:-240}" python3 benchmarks/peer_trl_grpo.py --device cuda \
    --tokenizer "$SEARCHRL_SHARED_DATA/tokenizers/qwen3" --steps "${PEER_STEPS:-4}" ${PEER_ARGS:-} \
    --out "$RUN/peer_trl_gpu.json" --workdir "$SHM/peer-trl-gpu" 2>&1 | tee "$RUN/peer_trl_gpu.log" | tail -12
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  mkdir -p "$RUN/peer" && cp "$SHM"/peer-trl-gpu/*.log "$RUN/peer/" 2>/dev/null
  for m in "$SHM"/peer-trl-gpu/ours-*/metrics.jsonl; do  # our per-step metrics: phase times, tokens, peak memory
    [[ -f "$m" ]] && cp "$m" "$RUN/peer/$(basename "$(dirname "$m")")-metrics.jsonl"
  done
  for f in "$SHM"/peer-trl-gpu/ours-*/profile_step*.txt; do  # PEER_ARGS=--profile: one profiled step of ours
    [[ -f "$f" ]] && cp "$f" "$RUN/peer/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  rm -rf "$SHM/peer-trl-gpu"
fi

if [[ " ${PHASES:-tests peer rollout} " == *" rollout "* ]]; then
  echo "== decode and update against the bound ($(($(date +%s) - START)) s)"
  timeout "${ROLLOUT_TIMEOUT:-120}" python3 benchmarks/gpu_rollout.py --tokenizer "$SEARCHRL_SHARED_DATA/tokenizers/qwen3" \
    --profile "$RUN/decode_profile.txt" ${ROLLOUT_ARGS:-} --out "$RUN/gpu_rollout.json" 2>&1 | grep -v '^\[' | tee "$RUN/gpu_rollout.log" | tail -12
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi
exit $status
