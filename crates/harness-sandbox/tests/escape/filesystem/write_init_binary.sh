#!/bin/sh
# Escape attempt: write init binary. Prints ESCAPED when it succeeds; the test also checks the canaries.
echo x > /.harness-init 2>&1 && echo ESCAPED
