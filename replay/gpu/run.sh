#!/usr/bin/env bash
# Validate the shadow simulator against a real vLLM engine on one H200 or B200 (see README.md).
#
#   MODEL=/path/to/Qwen2.5-7B-Instruct bash replay/gpu/run.sh [OUT_DIR]
#
# Starts one vLLM OpenAI server on 127.0.0.1, measures its prefill profile, runs two replays of
# the bundled Mooncake trace against it, writes both validation reports (each request's TTFT
# predicted from the profile), and stops the server.  Expected: under 10 minutes with the weights
# already on local disk.  Every setting below can be overridden from the
# environment (the CPU dry run in README.md uses that).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${1:-replay-gpu-$(date +%Y%m%d-%H%M%S)}
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
PY=${PY:-python}
PORT=${PORT:-8011}
BLOCK=${BLOCK:-16}                 # vLLM's GPU default; TPB must be a multiple of it
NUM_BLOCKS=${NUM_BLOCKS:-4097}     # 4096 usable blocks = 65,536 tokens: small enough to evict
TPB=${TPB:-64}                     # Mooncake's 512-token blocks scaled 8x down (max prompt 23,936)
MAX_MODEL_LEN=${MAX_MODEL_LEN:-32768}
DTYPE=${DTYPE:-bfloat16}
N_SEQ=${N_SEQ:-300}                # run 1: one request at a time ...
SKIP_SEQ=${SKIP_SEQ:-3693}         # ... the trace's last 300 (65% of block accesses shared)
N_TIMED=${N_TIMED:-2000}           # run 2: trace arrival times ...
SKIP_TIMED=${SKIP_TIMED:-1993}     # ... the trace's last 2,000 (69% shared, 490 s of arrivals)
SPEEDUP=${SPEEDUP:-4}
ENGINE_ARGS=${ENGINE_ARGS:---max-num-seqs 64 --gpu-memory-utilization 0.90}
PROFILE=${PROFILE:-1}              # 0: no profile, no TTFT prediction
PROFILE_CACHED=${PROFILE_CACHED:-0,1024,4096,16384}   # replay --measure-profile's grid
PROFILE_NEW=${PROFILE_NEW:-256,1024,4096}
PROFILE_REPEATS=${PROFILE_REPEATS:-3}
TRACE=shadow/data/mooncake_synthetic.jsonl
mkdir -p "$OUT"

"$PY" -c "import vllm, sys; print('vllm', vllm.__version__, file=sys.stderr)"

"$PY" -m vllm.entrypoints.openai.api_server --host 127.0.0.1 --port "$PORT" \
    --model "$MODEL" --dtype "$DTYPE" --block-size "$BLOCK" \
    --enable-prefix-caching --enable-prompt-tokens-details \
    --num-gpu-blocks-override "$NUM_BLOCKS" --max-model-len "$MAX_MODEL_LEN" \
    $ENGINE_ARGS >"$OUT/server.log" 2>&1 &
SERVER=$!
# NOTE: the server runs in this script's process group; stop it (and its engine) on any exit.
trap 'kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true' EXIT

for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then break; fi
    if ! kill -0 "$SERVER" 2>/dev/null; then echo "server died; see $OUT/server.log" >&2; exit 1; fi
    sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null

# 0. The prefill profile: TTFT one request at a time over a grid of cached and new tokens (its
#    own cache_salt: nothing of it is hit later; its blocks are the first the engine evicts).
COST=()
if [ "$PROFILE" != 0 ]; then
    "$PY" -m replay --measure-profile --endpoint "http://127.0.0.1:$PORT" --no-progress \
        --profile-cached "$PROFILE_CACHED" --profile-new "$PROFILE_NEW" \
        --profile-repeats "$PROFILE_REPEATS" -o "$OUT/profile"
    COST=(--cost-model "profile:$OUT/profile/profile.jsonl")
fi

# 1. Exact check: one request at a time, the last 300 requests. Every request's measured cached
#    tokens must equal the prediction (match rate 1.0).
"$PY" -m replay --trace "$TRACE" --endpoint "http://127.0.0.1:$PORT" --tokens-per-block "$TPB" \
    --skip-requests "$SKIP_SEQ" --max-requests "$N_SEQ" --max-output-tokens 32 --concurrency 1 --seed 1 \
    --validate ${COST[@]+"${COST[@]}"} --no-progress -o "$OUT/sequential" | tee "$OUT/sequential.txt"

# 2. Timed: 2,000 requests at the trace's own arrival times, 4x faster (about 122 s of arrivals),
#    for TTFT under load and the fitted prefill model.  A new seed makes the earlier run's blocks
#    useless, which behaves exactly like a cold cache of the same size.
"$PY" -m replay --trace "$TRACE" --endpoint "http://127.0.0.1:$PORT" --tokens-per-block "$TPB" \
    --skip-requests "$SKIP_TIMED" --max-requests "$N_TIMED" --max-output-tokens 64 --speedup "$SPEEDUP" --seed 2 \
    --validate ${COST[@]+"${COST[@]}"} --no-progress -o "$OUT/timed" | tee "$OUT/timed.txt"

echo "reports: $OUT/sequential/report.md $OUT/timed/report.md" >&2
# The exact check decides the exit status: every one-at-a-time request must match.
"$PY" - "$OUT/sequential/report.json" <<'PYEOF'
import json, sys
v = json.load(open(sys.argv[1]))["validation"]
print(f"sequential: {v['n_match']} of {v['n_compared']} requests match (match rate {v['match_rate']})",
      file=sys.stderr)
sys.exit(0 if v["n_compared"] and v["n_match"] == v["n_compared"] else 1)
PYEOF
