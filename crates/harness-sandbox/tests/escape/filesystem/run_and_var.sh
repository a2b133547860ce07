#!/bin/sh
# Escape attempt: run and var. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls -la /run /var /var/run /var/tmp 2>&1 && echo ESCAPED
