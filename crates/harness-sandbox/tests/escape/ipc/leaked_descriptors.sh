#!/bin/sh
# Escape attempt: leaked descriptors. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls -la /proc/self/fd 2>&1
for n in $(seq 3 64); do [ -e /proc/self/fd/$n ] && echo changed >&$n 2>/dev/null && echo ESCAPED fd $n; done; true
