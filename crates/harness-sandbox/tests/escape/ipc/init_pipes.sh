#!/bin/sh
# Escape attempt: init pipes. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls -la /proc/1/fd 2>&1
echo garbage > /proc/1/fd/1 2>&1 && echo ESCAPED
echo garbage > /proc/1/fd/0 2>&1 && echo ESCAPED; true
