#!/bin/sh
# Escape attempt: fill tmp. Prints ESCAPED when it succeeds; the test also checks the canaries.
dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; s=$(stat -c %s /tmp/fill); [ "$s" -gt 33554432 ] && echo ESCAPED tmp limit; rm -f /tmp/fill
