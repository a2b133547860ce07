#!/bin/sh
# Escape attempt: write etc. Prints ESCAPED when it succeeds; the test also checks the canaries.
echo 'evil::0:0::/:/bin/sh' >> /etc/passwd 2>&1 && echo ESCAPED
touch /etc/escape 2>&1 && echo ESCAPED
