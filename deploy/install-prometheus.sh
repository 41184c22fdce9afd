#!/usr/bin/env bash
# Install Debian's Prometheus (server + promtool) for the deploy tests; does not start it.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a system service where systemd runs; the tests start their own instance.
$SUDO systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
