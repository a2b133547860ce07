#!/bin/sh
# Escape attempt: nested userns mount. Prints ESCAPED when it succeeds; the test also checks the canaries.
unshare -Urm sh -c 'mount -t tmpfs x /tmp && echo ESCAPED' 2>&1; true
