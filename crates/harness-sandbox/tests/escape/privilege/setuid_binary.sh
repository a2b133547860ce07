#!/bin/sh
# Escape attempt: setuid binary. Prints ESCAPED when it succeeds; the test also checks the canaries.
for b in /usr/bin/su /usr/bin/passwd /usr/bin/newgrp /usr/bin/mount; do [ -x $b ] && [ "$($b --help >/dev/null 2>&1; id -u)" = 0 ] && echo ESCAPED; done
su -c 'id -u' root 2>&1 </dev/null | grep -qx 0 && echo ESCAPED; true
