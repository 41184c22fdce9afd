#!/usr/bin/env bash
# Launch vLLM (official CUDA wheel or image) on a GPU node with the shadow connector.
#
#   pip install vllm  &&  pip install /path/to/shadow   (builds the Cython simulator: needs gcc)
#   MODEL=Qwen/Qwen2.5-7B-Instruct TP=2 bash deploy/examples/gpu-node.sh
#
# Then point Prometheus at this host: deploy/prometheus/prometheus.yml, targets <host>:$PORT
# (job vllm) and <host>:$SHADOW_METRICS_PORT (job shadow-connector), both with one `deployment`
# label. DRY_RUN=1 prints the command instead of running it.
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
PORT=${PORT:-8000}
TP=${TP:-1}
SHADOW_METRICS_PORT=${SHADOW_METRICS_PORT:-9400}
SHADOW_METRICS_HOST=${SHADOW_METRICS_HOST:-0.0.0.0}   # 127.0.0.1 if Prometheus runs on this host
RECORD_DIR=${RECORD_DIR:-/var/lib/shadow/recordings}  # empty: no recording
POLICIES=${POLICIES:-}                                # e.g. "vllm,lru,s3fifo,arc,sieve" (default set if empty)
PYTHON=${PYTHON:-python3}

extra="\"metrics_port\":${SHADOW_METRICS_PORT},\"metrics_host\":\"${SHADOW_METRICS_HOST}\""
[ -n "$RECORD_DIR" ] && extra+=",\"record_dir\":\"${RECORD_DIR}\""
[ -n "$POLICIES" ] && extra+=",\"policies\":\"${POLICIES}\""
KV_TRANSFER_CONFIG="{\"kv_connector\":\"ShadowConnector\",\"kv_connector_module_path\":\"shadow.connector\",\"kv_role\":\"kv_producer\",\"kv_connector_extra_config\":{${extra}}}"

# NOTE: keep vLLM's stats on (no --disable-log-stats): the shadow's series reach vLLM's /metrics
# through the connector-stats path. Beside LMCache or NIXL, nest the same dict inside a
# MultiConnector's "connectors" list instead (see deploy/README.md).
cmd=("$PYTHON" -m vllm.entrypoints.openai.api_server
     --model "$MODEL" --host 0.0.0.0 --port "$PORT"
     --tensor-parallel-size "$TP"
     --enable-prefix-caching
     --kv-transfer-config "$KV_TRANSFER_CONFIG")

if [ -n "${DRY_RUN:-}" ]; then printf '%s\n' "${cmd[@]}"; exit 0; fi
[ -n "$RECORD_DIR" ] && mkdir -p "$RECORD_DIR"
exec "${cmd[@]}" "$@"
