#!/bin/sh
# Escape attempt: interfaces. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat /proc/net/dev; ip -o link 2>&1 | grep -v ' lo:' | grep -q . && echo ESCAPED; true
