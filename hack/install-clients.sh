#!/usr/bin/env bash
# Installs the Kubernetes clients that no one here wrote, which the e2e tests use as judges of
# compatibility. Idempotent: a client already installed is left as it is.
#   python3-kubernetes        Debian's package of the official Python client, for /usr/bin/python3
#   @kubernetes/client-node   the official JavaScript client, from npm, pinned, into
#                             $MULTICACHE_BIN_DIR/js/node_modules (node and npm from Debian if missing)
set -euo pipefail

js_version=1.4.0
bin_dir=${MULTICACHE_BIN_DIR:-$PWD/bin}
sudo=""
if [[ $(id -u) != 0 ]]; then
  sudo=sudo
fi

# apt_install installs Debian packages; apt-cache knows nothing before the first update on a
# new machine.
apt_install() {
  if ! command -v apt-get >/dev/null; then
    echo "clients: $* missing and there is no apt-get here: install them by hand" >&2
    exit 1
  fi
  if ! apt-cache show "$1" >/dev/null 2>&1; then
    $sudo apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

py=/usr/bin/python3
if [[ -x $py ]] && $py -c 'import kubernetes' 2>/dev/null; then
  echo "clients: python3-kubernetes is installed ($($py -c 'import kubernetes; print(kubernetes.__version__)'))"
else
  echo "clients: installing Debian's python3-kubernetes"
  apt_install python3-kubernetes
  $py -c 'import kubernetes; print("clients: python3-kubernetes", kubernetes.__version__, "installed")'
fi

js=$bin_dir/js
pkg=$js/node_modules/@kubernetes/client-node/package.json
if [[ -f $pkg ]] && grep -q "\"version\": \"$js_version\"" "$pkg"; then
  echo "clients: @kubernetes/client-node $js_version is installed in $js"
else
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "clients: installing Debian's nodejs and npm"
    apt_install nodejs npm
  fi
  echo "clients: installing @kubernetes/client-node $js_version into $js"
  mkdir -p "$js"
  npm install --prefix "$js" --no-audit --no-fund --no-save --silent "@kubernetes/client-node@$js_version"
  grep -q "\"version\": \"$js_version\"" "$pkg"
fi
