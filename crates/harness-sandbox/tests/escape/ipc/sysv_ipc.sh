#!/bin/sh
# Escape attempt: sysv ipc. Prints ESCAPED when it succeeds; the test also checks the canaries.
ipcs 2>&1; true
