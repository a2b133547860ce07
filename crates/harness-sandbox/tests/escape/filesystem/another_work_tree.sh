#!/bin/sh
# Escape attempt: another work tree. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls -la "$OTHER_WORK" 2>&1; cat "$OTHER_WORK/private.txt" 2>&1; echo changed > "$OTHER_WORK/private.txt" 2>&1 && echo ESCAPED
