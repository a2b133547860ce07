#!/bin/sh
# Escape attempt: mknod. Prints ESCAPED when it succeeds; the test also checks the canaries.
mknod dev-mem c 1 1 2>&1 && echo ESCAPED
mkfifo fifo 2>&1; rm -f fifo
