#!/usr/bin/env bash
# Installs what the harness-sandbox tests need, from Debian: bubblewrap (the namespace backend),
# and the toolchains of the "normal work still runs" suite. They must be Debian's, under /usr:
# rustup's and pyenv's trees live under /root (mode 700), which a sandbox uid cannot read, and
# the sandbox's mount view holds /usr, /bin and /lib* only. Idempotent: when every tool is in
# place it returns at once. A prerequisite that cannot be installed fails here, so the tests
# never run (or skip) without it.
set -euo pipefail

need=()
have() { [ -x "$1" ]; }
have /usr/bin/bwrap || need+=(bubblewrap)
have /usr/bin/git || need+=(git)
have /usr/bin/make || need+=(make)
have /usr/bin/python3 || need+=(python3)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv python3-pip)
/usr/bin/python3 -c 'import wheel, setuptools' 2>/dev/null || need+=(python3-wheel python3-setuptools)
have /usr/bin/node || need+=(nodejs)
have /usr/bin/npm || need+=(npm)
have /usr/bin/cargo || need+=(cargo)
have /usr/bin/rustc || need+=(rustc)
have /usr/bin/setpriv || need+=(util-linux)

if [ "${#need[@]}" -gt 0 ]; then
  echo "sandbox-deps: installing ${need[*]}" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}") >&2
fi

for tool in /usr/bin/bwrap /usr/bin/git /usr/bin/make /usr/bin/python3 /usr/bin/node /usr/bin/npm /usr/bin/cargo /usr/bin/rustc; do
  have "$tool" || { echo "sandbox-deps: $tool is missing after the install" >&2; exit 1; }
done
/usr/bin/python3 -c 'import ensurepip, venv, wheel, setuptools' || { echo "sandbox-deps: python3 venv/wheel/setuptools missing" >&2; exit 1; }
echo "sandbox-deps: bubblewrap $(/usr/bin/bwrap --version | awk '{print $2}')" >&2
