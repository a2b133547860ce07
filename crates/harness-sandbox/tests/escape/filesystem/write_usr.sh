#!/bin/sh
# Escape attempt: write usr. Prints ESCAPED when it succeeds; the test also checks the canaries.
touch /usr/bin/escape-marker 2>&1 && echo ESCAPED
echo x >> /usr/bin/sh 2>&1 && echo ESCAPED
