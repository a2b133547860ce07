#!/bin/sh
# Escape attempt: rename over. Prints ESCAPED when it succeeds; the test also checks the canaries.
echo changed > over; mv over "$CANARY_FILE" 2>&1 && echo ESCAPED; rm -f over
