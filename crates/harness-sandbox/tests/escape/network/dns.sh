#!/bin/sh
# Escape attempt: dns. Prints ESCAPED when it succeeds; the test also checks the canaries.
getent hosts deb.debian.org 2>&1 && echo ESCAPED; cat /etc/resolv.conf 2>&1; true
