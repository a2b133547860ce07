#!/bin/sh
# Escape attempt: landlock reads. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat /.harness-init >/dev/null 2>&1 && echo ESCAPED read outside the read roots
ls / 2>&1
