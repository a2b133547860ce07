#!/bin/sh
# Escape attempt: absolute path read. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat "$SECRET_FILE" 2>&1
