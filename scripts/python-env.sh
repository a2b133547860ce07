#!/usr/bin/env bash
# Installs the official `openai` Python SDK and LangChain's `langchain-openai` (PyPI) in a venv
# outside the repository, for the `harness serve` tests that use them as clients, and prints
# the venv's python path.
# Idempotent: a second run with the pinned version in place returns at once.
# Tests find the interpreter through HARNESS_TEST_PYTHON (default /var/tmp/harness-py/bin/python).
set -euo pipefail

OPENAI_VERSION="${HARNESS_OPENAI_VERSION:-3.57.0}"
LANGCHAIN_OPENAI_VERSION="${HARNESS_LANGCHAIN_OPENAI_VERSION:-1.8.1}"
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

"$DIR/bin/python" -c "import openai, langchain_openai" >&2
echo "$DIR/bin/python"
