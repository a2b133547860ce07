#!/bin/sh
# Escape attempt: kill host process. Prints ESCAPED when it succeeds; the test also checks the canaries.
kill -9 "$HOST_PID" 2>&1 && echo ESCAPED
kill -0 "$HARNESS_PID" 2>&1 && echo ESCAPED
