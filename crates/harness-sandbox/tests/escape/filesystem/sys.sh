#!/bin/sh
# Escape attempt: sys. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls /sys 2>&1 && echo ESCAPED
cat /sys/kernel/security/lsm 2>&1
