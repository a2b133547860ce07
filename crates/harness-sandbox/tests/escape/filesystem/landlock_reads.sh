#!/bin/sh
# Escape attempt: landlock reads. Prints ESCAPED when it succeeds; the test also checks the canaries.
# (/.harness-init is readable and executable on purpose: the snapshot restore runs its `unpack`
# mode inside the sandbox. It is a read-only bind of a public binary.)
ls / >/dev/null 2>&1 && echo ESCAPED listed / outside the read roots
ls /.. /proc/1/root/ >/dev/null 2>&1 && echo ESCAPED listed a directory outside the read roots
echo x > /.harness-init 2>&1 && echo ESCAPED wrote the init binary
ls / 2>&1
