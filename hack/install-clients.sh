#!/usr/bin/env bash
# Installs the Kubernetes clients that no one here wrote, which the e2e tests use as judges of
# compatibility. Idempotent: a client already installed is left as it is.
#   python3-kubernetes   Debian's package of the official Python client, for /usr/bin/python3
set -euo pipefail

py=/usr/bin/python3
if [[ -x $py ]] && $py -c 'import kubernetes' 2>/dev/null; then
  echo "clients: python3-kubernetes is installed ($($py -c 'import kubernetes; print(kubernetes.__version__)'))"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "clients: python3-kubernetes is missing and there is no apt-get here: install Debian's python3-kubernetes by hand" >&2
  exit 1
fi
sudo=""
if [[ $(id -u) != 0 ]]; then
  sudo=sudo
fi
echo "clients: installing Debian's python3-kubernetes"
# apt-cache knows nothing before the first update on a new machine.
if ! apt-cache show python3-kubernetes >/dev/null 2>&1; then
  $sudo apt-get update -qq
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-kubernetes >/dev/null
$py -c 'import kubernetes; print("clients: python3-kubernetes", kubernetes.__version__, "installed")'
