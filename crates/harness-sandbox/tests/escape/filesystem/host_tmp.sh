#!/bin/sh
# Escape attempt: host tmp. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls -la /tmp 2>&1; cat /tmp/"$HOST_TMP_MARKER" 2>&1 && echo ESCAPED
