#!/bin/sh
# Escape attempt: home and root. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls -la /root /home 2>&1; cat /root/.bash_history 2>&1; ls /root/.cargo /root/.ssh 2>&1
