#!/usr/bin/env bash
# tests/gpu/run.sh - the CUDA backend on a machine with an NVIDIA GPU: one run, written for one H200 in
# well under 8 minutes, that prints one JSON summary line last and exits 0 only if every check passed.
#
#   1. configure and build whet, unit_backend and unit_model with -DWHET_CUDA=ON in a fresh build dir
#      ($WHET_GPU_BUILD_DIR, default build-gpu; WHET_GPU_KEEP_BUILD=1 reuses it; the build type is
#      $WHET_GPU_BUILD_TYPE, default Release); or, on a GPU machine without the project's libraries, the
#      build tests/gpu/pack.sh packed elsewhere: WHET_GPU_PREBUILT=ITS_OUT_DIR
#   2. find the GPU (nvidia-smi); without one, stop here: exit 2, "no GPU" in the summary
#   3. `unit_backend cuda`: every op against plain references and finite differences (fp32 tolerances
#      in tests/unit/backend/test_backend.c, the same as the CPU's); `unit_model cuda`: the model engine
#      on the GPU against PyTorch's logits, losses, gradients and AdamW step (relative 1e-4, fp32)
#   4. the tiny model (`whet model init --preset tiny`), SFT with LoRA and full fine-tuning, STEPS steps
#      each with "device": "cpu" and "cuda" from the same seed; both compute in fp32 and differ only in
#      the order of their sums, so: step 1's loss within 1e-4 (relative), step 1's gradient norm within
#      1e-3 (the backward pass), every step's loss within 2e-2 (what the optimiser makes of rounding
#      differences over STEPS steps of Adam at the e2e tests' learning rates)
#   5. NCCL: the LoRA run of 4 again on the GPU as a gang of one rank ("distributed" with world_size 1
#      and a rendezvous), through the gang's collectives; its losses as 4's against the CPU's
#      and again with the NCCL environment of a GPU gang rank's sandbox (trainer_sandbox.h), and inside
#      that sandbox (`whet sandbox run` with the rank's devices, network, unix sockets and /dev/shm)
#   6. `whet score --device cuda` against the CPU's on the validation set (mean loss within 1e-4)
#   7. `whet sample --device cuda` greedy (temperature 0) for 32 tokens equal to the CPU's on the fully
#      fine-tuned model; reported, not required: greedy on the random model (its logits are close to each
#      other, so a near-tie may go either way between two summation orders) and a seeded draw
#      (temperature 0.9, top-p 0.95; it may differ where a draw is within float rounding of a boundary)
#   8. throughput of a training step (reported, not required): whet against PyTorch on the same device
#
# WHET_GPU_DEVICE=cpu runs every step with the CPU in place of the GPU (both sides of each comparison on
# the CPU): a check of this script itself on a machine without a GPU.
#
# The build needs what deploy/install-deps.sh installs, and the CUDA toolkit (nvcc) on PATH or at
# /usr/local/cuda. The summary: {"ok", "gpu", "stopped_at" (when stopped early), per-step results,
# "seconds"}.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${WHET_GPU_BUILD_DIR:-build-gpu}
STEPS=${WHET_GPU_STEPS:-20}
dev=${WHET_GPU_DEVICE:-cuda}
start=$(date +%s)
work=$(mktemp -d /tmp/whet-gpu.XXXXXX)
# WHET_GPU_LOGS=FILE keeps every check's log (and the runs' metrics) in a tar.gz when the run ends
keep_logs() {
  [ -n "${WHET_GPU_LOGS:-}" ] || return 0
  (cd "$work" && find . -maxdepth 2 \( -name '*.log' -o -name '*.err' -o -name metrics.jsonl \) -print0 |
    tar -czf "$WHET_GPU_LOGS" --null -T -)
}
trap 'keep_logs; rm -rf "$work"' EXIT
results="$work/results" # one "key<TAB>json value" per line, assembled into the summary
: > "$results"
failed=0

put() { printf '%s\t%s\n' "$1" "$2" >> "$results"; }
put_str() { put "$1" "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$2")"; }
summary() { # summary EXIT_STATUS
  python3 - "$results" "$1" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
out = {}
for line in open(sys.argv[1]):
    k, v = line.rstrip("\n").split("\t", 1)
    out[k] = json.loads(v)
out = {"ok": sys.argv[2] == "0", **out, "seconds": int(sys.argv[3])}
print(json.dumps(out))
PY
  exit "$1"
}
check() { # check NAME CMD...: runs CMD, logs to $work/NAME.log, records pass/fail
  local name=$1 rc=0
  shift
  echo "== $name" >&2
  "$@" > "$work/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    put_str "$name" pass
  else
    failed=1
    put_str "$name" "fail (exit $rc)"
    echo "-- $name failed (exit $rc); the end of its log:" >&2
    tail -n 40 "$work/$name.log" >&2
  fi
  return "$rc"
}

# ---- 1. build, or a build packed elsewhere (WHET_GPU_PREBUILT: tests/gpu/pack.sh's OUT_DIR, for a GPU machine
# without the project's libraries): its libraries unpacked, CUDA's found among the machine's own; only the
# programs this script runs see them (RUN and the whet wrapper), so python3 and PyTorch keep their own
RUN=()
if [ -n "${WHET_GPU_PREBUILT:-}" ]; then
  build=$(cd "$WHET_GPU_PREBUILT" && pwd)
  mkdir -p "$work/pack" "$work/bin"
  tar -C "$work/pack" -xzf "$build/lib.tar.gz"
  cuda_dirs=$(find /usr/local /usr/lib /opt \( -name libcublasLt.so.13 -o -name libcublas.so.13 -o -name libcudart.so.13 \
    -o -name libnccl.so.2 \) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd: -)
  libs="$work/pack/lib${cuda_dirs:+:$cuda_dirs}"
  RUN=(env "LD_LIBRARY_PATH=$libs")
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$build/whet" > "$work/bin/whet"
  chmod +x "$work/bin/whet"
  WHET="$work/bin/whet"
  echo "== prebuilt ($build); libraries: $libs" >&2
  missing=$("${RUN[@]}" ldd "$build/whet" "$build/tests/unit/model/unit_model" | grep 'not found' | sort -u)
  if [ -n "$missing" ]; then
    echo "$missing" >&2
    put_str stopped_at "libraries not found: $(echo "$missing" | awk '{print $1}' | paste -sd' ' -)"
    summary 1
  fi
  put_str build prebuilt
else
  [ -n "${WHET_GPU_KEEP_BUILD:-}" ] || rm -rf "$build"
  command -v nvcc >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
  echo "== build ($build)" >&2
  if ! cmake -S . -B "$build" -DWHET_CUDA=ON -DWHET_WERROR=ON -DCMAKE_BUILD_TYPE="${WHET_GPU_BUILD_TYPE:-Release}" > "$work/configure.log" 2>&1; then
    tail -n 30 "$work/configure.log" >&2
    put_str stopped_at configure
    summary 1
  fi
  if ! cmake --build "$build" -j"$(nproc)" --target whet unit_backend unit_model > "$work/build.log" 2>&1; then
    grep -E "error|Error" "$work/build.log" | head -n 30 >&2
    put_str stopped_at build
    summary 1
  fi
  put_str build pass
  build=$(cd "$build" && pwd)
  WHET="$build/whet"
fi

# ---- 2. the GPU
gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -n1)
[ "$dev" != cpu ] || gpu="none (WHET_GPU_DEVICE=cpu: the CPU stands in)"
if [ -z "$gpu" ]; then
  echo "no GPU: nvidia-smi lists none here; the build passed, the GPU checks need a machine with one" >&2
  put_str gpu "none"
  put_str stopped_at "no GPU"
  summary 2
fi
put_str gpu "$gpu"
echo "GPU: $gpu" >&2

# ---- 3. the op tests on the device
check unit_backend_cuda "${RUN[@]}" timeout 150 "$build/tests/unit/backend/unit_backend" "${dev%%:*}"
check unit_model_cuda "${RUN[@]}" env WHET_FIXTURES="$root/tests/fixtures" timeout 150 "$build/tests/unit/model/unit_model" "$dev"

# ---- 4. SFT on cpu and cuda
"$WHET" model init --preset tiny --out "$work/model" > /dev/null
train() { # train NAME DEVICE LORA_FIELD HYPERPARAMETERS [MORE_FIELDS]
  cat > "$work/$1.json" <<JSON
{"method": "sft", "model": "$work/model", "training_file": "$root/tests/fixtures/sft/train.jsonl",
 "output_dir": "$work/$1", "seed": 1, "max_steps": $STEPS, "device": "$2", "lora": $3,
 "hyperparameters": $4 ${5:-}}
JSON
  ${TRAIN_IN:-timeout 120} "$WHET" train --config "$work/$1.json" --quiet > /dev/null
}
compare_losses() { # compare_losses CPU_RUN CUDA_RUN: the metrics of two runs
  python3 - "$work/$1/metrics.jsonl" "$work/$2/metrics.jsonl" "$STEPS" <<'PY'
import json, sys
cpu = [json.loads(l) for l in open(sys.argv[1])]
gpu = [json.loads(l) for l in open(sys.argv[2])]
steps = int(sys.argv[3])
assert len(cpu) == len(gpu) == steps, f"steps: cpu {len(cpu)}, cuda {len(gpu)}, expected {steps}"
rel = lambda a, b: abs(a - b) / max(abs(a), 1e-12)
first_loss = rel(cpu[0]["loss"], gpu[0]["loss"])
first_norm = rel(cpu[0]["grad_norm"], gpu[0]["grad_norm"])
worst = max(rel(c["loss"], g["loss"]) for c, g in zip(cpu, gpu))
print(json.dumps({"steps": steps, "loss_cpu": [round(c["loss"], 5) for c in cpu[::5]],
                  "loss_cuda": [round(g["loss"], 5) for g in gpu[::5]], "step1_loss_rel": first_loss,
                  "step1_grad_norm_rel": first_norm, "max_loss_rel": worst}))
assert all(c["tokens"] == g["tokens"] for c, g in zip(cpu, gpu)), "different batches"
assert first_loss <= 1e-4, f"step 1 loss: cpu {cpu[0]['loss']}, cuda {gpu[0]['loss']}"
assert first_norm <= 1e-3, f"step 1 grad norm: cpu {cpu[0]['grad_norm']}, cuda {gpu[0]['grad_norm']}"
assert worst <= 2e-2, f"a step's loss differs by {worst:.2e} (relative)"
PY
}
HP='{"batch_size": 4, "learning_rate": 0.003, "max_seq_len": 128, "warmup_steps": 2}'
FULL_HP='{"batch_size": 4, "learning_rate": 0.001, "max_seq_len": 128}'
for mode in lora full; do
  if [ $mode = lora ]; then lora='{"r": 8, "alpha": 16}' hp=$HP; else lora=null hp=$FULL_HP; fi
  check "sft_${mode}_cpu" train "$mode-cpu" cpu "$lora" "$hp"
  check "sft_${mode}_cuda" train "$mode-cuda" "$dev" "$lora" "$hp"
  if [ -s "$work/$mode-cpu/metrics.jsonl" ] && [ -s "$work/$mode-cuda/metrics.jsonl" ]; then
    if check "sft_${mode}_compare" compare_losses "$mode-cpu" "$mode-cuda"; then
      put "sft_${mode}" "$(head -n1 "$work/sft_${mode}_compare.log")"
    fi
  fi
done

# ---- 5. NCCL: a gang of one rank on the GPU, through the gang's code path (every collective of data
# parallelism: the gradient's bucket all-reduces on the device, the step's sums staged from the host)
nccl_compare() {
  compare_losses lora-cpu nccl-cuda &&
    python3 -c 'import json,sys; assert all("comm_bytes" in json.loads(l) for l in open(sys.argv[1])), "no gang figures"' \
      "$work/nccl-cuda/metrics.jsonl"
}
check nccl_gang_of_one train nccl-cuda "$dev" '{"r": 8, "alpha": 16}' "$HP" \
  ', "distributed": {"world_size": 1, "rank": 0, "rendezvous": "127.0.0.1:0"}' &&
  check nccl_compare nccl_compare && put nccl "$(head -n1 "$work/nccl_compare.log")"

# 5b. the same gang of one with the environment a GPU gang rank's sandbox gives NCCL (the list of
# executor/agent/trainer_sandbox.c's trainer_sandbox_nccl_env; why each: comm_nccl.c): NCCL must start
# and train alike without cuMem, CUDA P2P, NVLS or InfiniBand
nccl_sandbox_env() {
  (export NCCL_CUMEM_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_IB_DISABLE=1
   train nccl-env "$dev" '{"r": 8, "alpha": 16}' "$HP" \
     ', "distributed": {"world_size": 1, "rank": 0, "rendezvous": "127.0.0.1:0"}') &&
    compare_losses lora-cpu nccl-env
}
check nccl_sandbox_env nccl_sandbox_env && put nccl_sandbox_env "$(tail -n1 "$work/nccl_sandbox_env.log")"

# 5c. that gang of one inside the sandbox a GPU gang rank gets (executor/agent/trainer_sandbox.h): the
# node's device nodes, the gang's network (its peer, its ports, path-named unix sockets), a /dev/shm of
# its own, the NCCL environment of 5b, only the files it needs bound
in_gang_sandbox() { # in_gang_sandbox WHET train --config CONFIG ...: the run directory is the config's name
  local cfg=$4 devices=()
  for d in nvidiactl nvidia-uvm nvidia-uvm-tools nvidia0; do [ -e "/dev/$d" ] && devices+=(--device "$d"); done
  if [ ${#RUN[@]} -gt 0 ]; then # a prebuilt pack: its wrapper and libraries, and CUDA's where /usr does not hold them
    devices+=(--readonly "$work/bin")
    local IFS=:
    for d in $libs; do case $d in /usr/*) ;; *) devices+=(--readonly "$d") ;; esac; done
  fi
  mkdir -p "${cfg%.json}" "$work/gang-shm"
  "$WHET" sandbox run "${devices[@]}" --peer 127.0.0.1 --peer-ports 29500-29599 --unix-sockets --shm "$work/gang-shm" \
    --wall 240 --procs 256 --readonly "$build" --readonly "$root/tests/fixtures" --readonly "$work/model" \
    --readonly "$cfg" --writable "${cfg%.json}" --env PATH=/usr/bin:/bin --env HOME=/tmp \
    --env NCCL_SOCKET_IFNAME=lo --env NCCL_CUMEM_ENABLE=0 --env NCCL_P2P_DISABLE=1 --env NCCL_NVLS_ENABLE=0 \
    --env NCCL_IB_DISABLE=1 -- "$@"
}
nccl_sandboxed() {
  TRAIN_IN=in_gang_sandbox train nccl-sandboxed "$dev" '{"r": 8, "alpha": 16}' "$HP" \
    ', "distributed": {"world_size": 1, "rank": 0, "rendezvous": "127.0.0.1:0"}' &&
    compare_losses lora-cpu nccl-sandboxed
}
check nccl_sandboxed nccl_sandboxed && put nccl_sandboxed "$(tail -n1 "$work/nccl_sandboxed.log")"

# ---- 6. score on both devices
python3 - "$root/tests/fixtures/sft/valid.jsonl" > "$work/texts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    msgs = json.loads(line)["messages"]
    print(json.dumps("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)))
PY
"$WHET" tokenize --tokenizer "$work/model/tokenizer.json" --json < "$work/texts.jsonl" |
  sed 's/^/{"input_ids":/; s/$/}/' > "$work/ids.jsonl"
score_compare() {
  "$WHET" score --model "$work/model" --device cpu --data "$work/ids.jsonl" > "$work/cpu.scores" &&
    "$WHET" score --model "$work/model" --device "$dev" --data "$work/ids.jsonl" > "$work/cuda.scores" &&
    python3 - "$work/cpu.scores" "$work/cuda.scores" <<'PY'
import json, sys
cpu, gpu = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(cpu) == len(gpu) > 0 and all(c["tokens"] == g["tokens"] for c, g in zip(cpu, gpu))
mean = lambda rs: sum(r["loss"] for r in rs) / len(rs)
rel = abs(mean(cpu) - mean(gpu)) / mean(cpu)
print(json.dumps({"mean_loss_cpu": mean(cpu), "mean_loss_cuda": mean(gpu), "rel": rel}))
assert rel <= 1e-4, rel
PY
}
check score_compare score_compare && put score "$(head -n1 "$work/score_compare.log")"

# ---- 7. greedy and seeded sampling
sample_compare() { # sample_compare MODEL_DIR PROMPT ARGS...: cpu and cuda must print the same text
  local model=$1 prompt=$2
  shift 2
  local a b
  a=$("$WHET" sample --model "$model" --device cpu --prompt "$prompt" "$@") || return 1
  b=$("$WHET" sample --model "$model" --device "$dev" --prompt "$prompt" "$@") || return 1
  printf 'cpu:  %s\ncuda: %s\n' "$a" "$b"
  [ "$a" = "$b" ]
}
full_model="$work/full-cpu/final"
[ -d "$full_model" ] || full_model="$work/model"
check greedy_trained sample_compare "$full_model" "What is the capital of Peru?" --max-tokens 32 --temperature 0
report_equal() { # report_equal KEY sample_compare ARGS...: recorded, not required
  local key=$1
  shift
  if "$@" > "$work/$key.log" 2>&1; then put "$key" true; else put "$key" false; cat "$work/$key.log" >&2; fi
}
report_equal greedy_random_equal sample_compare "$work/model" "Add 2 and 3." --max-tokens 32 --temperature 0
report_equal seeded_equal sample_compare "$full_model" "Add 2 and 3." --max-tokens 32 --temperature 0.9 --top-p 0.95 \
  --seed 5

# ---- 8. throughput, reported, not required: one training step of random models shaped like Qwen3-0.6B
# (28 layers, hidden 1024, 16 heads, SwiGLU 3072, vocabulary 151,936) and Llama-3.2-1B (16 layers, hidden
# 2048, 32 heads, SwiGLU 8192, vocabulary 128,256), tied embeddings, plain multi-head attention of head
# size 64, one packed sequence of 2048 tokens, full fine-tuning and LoRA r16 on every linear layer; whet (tests/bench/train/bench_train.c) against PyTorch on the same device in the same run,
# PyTorch as written for the CPU peer (fp32, matmul + masked softmax: the same arithmetic as whet's) and as
# a GPU trainer runs it (bf16 autocast, fused causal attention). WHET_GPU_BENCH=0 leaves it out.
bench_one() { # bench_one KEY CMD...: the command's last line (its JSON) under KEY, or why it has none
  local key=$1 line
  shift
  if [ $(( $(date +%s) - start )) -ge "${WHET_GPU_BENCH_UNTIL:-420}" ]; then # the run's time is nearly up
    put_str "bench_$key" "skipped: ${WHET_GPU_BENCH_UNTIL:-420} s had passed"
    return
  fi
  echo "== bench $key" >&2
  if line=$(timeout 120 "$@" 2> "$work/bench-$key.err" | tail -n1) && [ -n "$line" ]; then
    put "bench_$key" "$line"
  else
    put_str "bench_$key" "failed: $(tail -n3 "$work/bench-$key.err" | tr '\n' ' ')"
  fi
}
if [ "${WHET_GPU_BENCH:-1}" != 0 ]; then
  bench=$build/bench_train # a pack has it; a build here compiles it
  if [ ! -x "$bench" ]; then
    bench=$work/bench_train
    BUILD="$build" tests/bench/engine_cc.sh tests/bench/train/bench_train.c "$bench" -Wl,--wrap=backend_open \
      > "$work/bench-build.log" 2>&1 || tail -n 20 "$work/bench-build.log" >&2
  fi
  torch_dev=$dev
  [ "$dev" != cpu ] || torch_dev=cpu
  # name, then LAYERS HIDDEN HEADS FFN VOCAB B T (bench_train's and bench_torch.py's arguments)
  while read -r name shape; do
    for r in 0 16; do
      bench_one "${name}_whet_r$r" "${RUN[@]}" "$bench" step $shape $r 3 "$dev"
      if python3 -c 'import torch' 2> /dev/null; then
        bench_one "${name}_torch_fp32_r$r" python3 tests/bench/train/bench_torch.py $shape $r 3 4 "$torch_dev"
        bench_one "${name}_torch_bf16_sdpa_r$r" python3 tests/bench/train/bench_torch.py $shape $r 3 4 "$torch_dev" bf16 sdpa
      fi
    done
  done <<'SHAPES'
qwen3_0.6b 28 1024 16 3072 151936 1 2048
llama3.2_1b 16 2048 32 8192 128256 1 2048
SHAPES
fi

summary "$failed"
