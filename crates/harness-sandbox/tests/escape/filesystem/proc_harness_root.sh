#!/bin/sh
# Escape attempt: proc harness root. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat /proc/"$HARNESS_PID"/root"$SECRET_FILE" 2>&1
ls /proc/"$HARNESS_PID" 2>&1
