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
# Without systemd the package's init script may have started it: stop it too (tests pick free ports,
# but a stray server on 9090 would confuse an operator following deploy/README.md).
if [ -x /etc/init.d/prometheus ]; then $SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true; fi
prometheus --version 2>&1 | head -1
