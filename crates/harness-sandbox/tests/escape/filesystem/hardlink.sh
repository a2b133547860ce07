#!/bin/sh
# Escape attempt: hardlink. Prints ESCAPED when it succeeds; the test also checks the canaries.
ln "$CANARY_FILE" hardlink 2>&1 && echo changed >> hardlink && echo ESCAPED; ln /.harness-init hl2 2>&1 && echo ESCAPED; rm -f hardlink hl2
