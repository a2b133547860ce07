#!/bin/sh
# Escape attempt: proc environ. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat /proc/"$HARNESS_PID"/environ 2>&1 | tr '\0' '\n'
for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null; done
cat /proc/1/cmdline 2>&1 | tr '\0' ' '
