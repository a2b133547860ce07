#!/bin/sh
# Escape attempt: mount tmpfs. Prints ESCAPED when it succeeds; the test also checks the canaries.
mkdir -p m && mount -t tmpfs none m 2>&1 && echo ESCAPED
