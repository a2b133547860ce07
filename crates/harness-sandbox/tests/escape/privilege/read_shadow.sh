#!/bin/sh
# Escape attempt: read shadow. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat /etc/shadow 2>&1 && echo ESCAPED
cat /etc/gshadow 2>&1 && echo ESCAPED
