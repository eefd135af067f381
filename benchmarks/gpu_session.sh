#!/usr/bin/env bash
# One short GPU session, prepared in advance (device time is scarce): the CUDA-only paths end to end through the CLI
# (fp16 + LAMB pretraining, evaluate/finetune/predict on the GPU, the SQuAD v2.0 head), then the speed figures of
# docs/model.md (albert-base 32x512 bf16 training vs transformers eager and compiled; inference; xxlarge).
#
#   bash benchmarks/gpu_session.sh            on a CUDA machine, from the repository root
#   DEV=cpu QUICK=1 bash benchmarks/gpu_session.sh   the same steps, tiny, on a CPU (to check the script)
#
# Inputs (GPU_DATA, default corpus/gpu, git-ignored; copy them from ../shared/data, which does not travel):
# spiece.model (an ALBERT SentencePiece model with its special pieces, e.g. albert-base-v2's), text.txt (plain English text), glue/SST-2/{train,dev}.tsv, squad2.json.
# Writes logs under $OUT (default /tmp/gpu_session); each step has its own time limit, so one slow step cannot
# take the others' time.
set -u
OUT=${OUT:-/tmp/gpu_session}; DEV=${DEV:-cuda}; QUICK=${QUICK:-0}; D=${GPU_DATA:-corpus/gpu}
mkdir -p "$OUT"; W=$(mktemp -d); export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}; A="$PY -m albertlm"
step() {   # step NAME SECONDS COMMAND...: its log in $OUT/NAME.log, its tail and time printed
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  echo "=== $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "--- $name: rc $rc, $((SECONDS - t0)) s"; tail -n "${TAILN:-12}" "$OUT/$name.log"
}
if [ "$QUICK" = 1 ]; then
  MODEL="--model.hidden_size 32 --model.num_layers 2 --model.num_heads 2 --model.ffn_size 64 --model.embedding_size 16"
  STEPS=4; BS=8; REPS="--reps 1 --infer-reps 1"; ROWS=2x64; XROWS=1x64; XPRESET=albert-base; FPREC=fp32
else
  MODEL="--model.hidden_size 256 --model.num_layers 4 --model.num_heads 4 --model.ffn_size 1024 --model.embedding_size 64"
  STEPS=200; BS=64; REPS="--reps 10 --infer-reps 10"; ROWS=32x512; XROWS=8x512; XPRESET=albert-xxlarge; FPREC=fp16
fi
echo "device $DEV, out $OUT, work $W"; date -u
[ "$DEV" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

if [ "$DEV" = cuda ]; then DT=bf16; else DT=fp32; fi
# 1. speed first (docs/model.md, the targets): albert-base training, ours/transformers, eager and compiled
[ "${SKIP_SPEED:-0}" = 1 ] || step speed_base_train 200 $PY benchmarks/model_speed.py --device "$DEV" --rows "$ROWS" --modes train --dtypes "$DT" \
  --variants ours,hf,ours-compiled,hf-compiled $REPS
# 2. pretraining data, then fp16 (a GradScaler on CUDA) with LAMB, then evaluate, on the device
step build 45 $A data build --input "$D/text.txt" --tokenizer "$D/spiece.model" --out "$W/data" \
  --max-seq-length 128 --dupe-factor 2 --no-progress
step pretrain_fp16_lamb 75 $A pretrain --data "$W/data" --out "$W/pre" --model.vocab_size 30000 $MODEL \
  --model.max_position_embeddings 128 --max-steps "$STEPS" --batch-size "$BS" --precision "$FPREC" \
  --optim.name lamb --dist.device "$DEV" --train.log_every 20 --no-progress
step evaluate 35 $A evaluate "$W/pre" --data "$W/data" --device "$DEV" --precision "$FPREC" --max-batches 50 --no-progress
# 3. fine-tuning on the device: SST-2 (bf16 autocast), its predictions; the SQuAD v2.0 head (fp32)
step finetune_sst2_bf16 60 $A finetune glue --task sst2 --data-dir "$D/glue/SST-2" --model "$W/pre" \
  --out "$W/sst2" --max-steps 40 --batch-size 32 --precision bf16 --device "$DEV" --no-progress
step predict_sst2 35 $A predict glue --task sst2 --data-dir "$D/glue/SST-2" --model "$W/sst2" --out "$W/pred" \
  --device "$DEV" --no-progress
step finetune_squad2 45 $A finetune squad --version 2.0 --train "$D/squad2.json" --dev "$D/squad2.json" \
  --model "$W/pre" --out "$W/squad" --max-seq-length 128 --doc-stride 64 --max-steps 20 --batch-size 16 --device "$DEV" --no-progress
[ "${SKIP_SPEED:-0}" = 1 ] && { rm -rf "$W"; exit 0; }
# 4. speed: inference, xxlarge training
step speed_base_infer 45 $PY benchmarks/model_speed.py --device "$DEV" --rows "$ROWS" --modes infer --dtypes "$DT" \
  --variants ours,hf $REPS
step speed_xxlarge_train 75 $PY benchmarks/model_speed.py --device "$DEV" --preset "$XPRESET" --rows "$XROWS" \
  --modes train --dtypes "$DT" --variants ours,hf $REPS
cp "$W"/pre/metrics.jsonl "$OUT"/pretrain_metrics.jsonl 2>/dev/null
rm -rf "$W"; date -u
