#!/usr/bin/env bash
# Installs the official `openai` Python SDK and LangChain's `langchain-openai` (PyPI) in a venv
# outside the repository, for the `harness serve` tests that use them as clients, and the
# official `prometheus-client` (its text-format parser reads `/metrics` in the metrics test);
# prints the venv's python path.
# Idempotent: a second run with the pinned version in place returns at once.
# Tests find the interpreter through HARNESS_TEST_PYTHON (default /var/tmp/harness-py/bin/python).
set -euo pipefail

OPENAI_VERSION="${HARNESS_OPENAI_VERSION:-3.57.0}"
LANGCHAIN_OPENAI_VERSION="${HARNESS_LANGCHAIN_OPENAI_VERSION:-1.8.1}"
PROMETHEUS_VERSION="${HARNESS_PROMETHEUS_CLIENT_VERSION:-0.26.0}"
DIR="${HARNESS_TEST_PY_DIR:-/var/tmp/harness-py}"

installed="$("$DIR/bin/python" -m pip show openai 2>/dev/null || true)"
if ! grep -qx "Version: $OPENAI_VERSION" <<<"$installed"; then
    echo "python-env: installing openai==$OPENAI_VERSION in $DIR" >&2
    python3 -m venv "$DIR"
    "$DIR/bin/python" -m pip install --quiet --disable-pip-version-check "openai==$OPENAI_VERSION" >&2
fi

installed="$("$DIR/bin/python" -m pip show langchain-openai 2>/dev/null || true)"
if ! grep -qx "Version: $LANGCHAIN_OPENAI_VERSION" <<<"$installed"; then
    echo "python-env: installing langchain-openai==$LANGCHAIN_OPENAI_VERSION in $DIR" >&2
    # The openai pin stays: langchain-openai may not move it.
    "$DIR/bin/python" -m pip install --quiet --disable-pip-version-check \
        "openai==$OPENAI_VERSION" "langchain-openai==$LANGCHAIN_OPENAI_VERSION" >&2
fi

installed="$("$DIR/bin/python" -m pip show prometheus-client 2>/dev/null || true)"
if ! grep -qx "Version: $PROMETHEUS_VERSION" <<<"$installed"; then
    echo "python-env: installing prometheus-client==$PROMETHEUS_VERSION in $DIR" >&2
    "$DIR/bin/python" -m pip install --quiet --disable-pip-version-check "prometheus-client==$PROMETHEUS_VERSION" >&2
fi

"$DIR/bin/python" -c "import openai, langchain_openai, prometheus_client" >&2
echo "$DIR/bin/python"
