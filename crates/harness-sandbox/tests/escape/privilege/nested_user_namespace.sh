#!/bin/sh
# Escape attempt: nested user namespace. Prints ESCAPED when it succeeds; the test also checks the canaries.
unshare -U -r id 2>&1 && echo ESCAPED
