#!/usr/bin/env bash
# Opt-in: installs the reference peer of bench/compare_peer.sh (Debian's python3-torch, CPU, with
# gloo). Kept out of ci/setup.sh so the main set-up stays lean; idempotent, non-interactive.
set -euo pipefail
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends python3-torch
fi
/usr/bin/python3 -c "import torch, torch.distributed as d; assert d.is_gloo_available(); print('torch', torch.__version__, 'with gloo')"
