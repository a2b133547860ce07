#!/bin/sh
# Escape attempt: shadow through proc root. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat /proc/1/root/etc/shadow 2>&1 && echo ESCAPED
