#!/bin/sh
# Escape attempt: proc sys write. Prints ESCAPED when it succeeds; the test also checks the canaries.
echo evil > /proc/sys/kernel/hostname 2>&1 && echo ESCAPED
echo 1 > /proc/sysrq-trigger 2>&1 && echo ESCAPED; true
