#!/bin/sh
# Escape attempt: symlink to file. Prints ESCAPED when it succeeds; the test also checks the canaries.
ln -sf "$CANARY_FILE" filelink; echo changed > filelink 2>&1 && echo ESCAPED; cat filelink 2>&1; rm -f filelink
