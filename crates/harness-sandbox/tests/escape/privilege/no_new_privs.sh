#!/bin/sh
# Escape attempt: no new privs. Prints ESCAPED when it succeeds; the test also checks the canaries.
grep -q '^NoNewPrivs:[[:space:]]1' /proc/self/status || echo ESCAPED
