#!/usr/bin/env bash
# Installs moto (PyPI, server mode) in a venv outside the repository: a local S3-compatible
# endpoint for the snapshot store's S3 tests. Prints the path of `moto_server`.
# Idempotent: a second run with the pinned version in place returns at once.
# Tests find it through HARNESS_TEST_MOTO (default /var/tmp/harness-moto/bin/moto_server) and
# start it themselves on a free 127.0.0.1 port.
set -euo pipefail

MOTO_VERSION="${HARNESS_MOTO_VERSION:-5.2.5}"
DIR="${HARNESS_TEST_MOTO_DIR:-/var/tmp/harness-moto}"

installed="$("$DIR/bin/python" -m pip show moto 2>/dev/null || true)"
if ! grep -qx "Version: $MOTO_VERSION" <<<"$installed"; then
    echo "moto: installing moto[server]==$MOTO_VERSION in $DIR" >&2
    python3 -m venv "$DIR"
    "$DIR/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" >&2
fi

test -x "$DIR/bin/moto_server"
echo "$DIR/bin/moto_server"
