#!/bin/sh
# Escape attempt: absolute path write. Prints ESCAPED when it succeeds; the test also checks the canaries.
echo changed > "$CANARY_FILE" 2>&1 && echo ESCAPED
ls -la "$(dirname "$CANARY_FILE")" 2>&1
