#!/bin/sh
# Escape attempt: symlink to root. Prints ESCAPED when it succeeds; the test also checks the canaries.
ln -sfn / rootlink; cat rootlink"$SECRET_FILE" 2>&1; echo changed > rootlink"$CANARY_FILE" 2>&1 && echo ESCAPED; rm -f rootlink
