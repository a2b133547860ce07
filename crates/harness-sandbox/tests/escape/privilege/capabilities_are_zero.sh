#!/bin/sh
# Escape attempt: capabilities are zero. Prints ESCAPED when it succeeds; the test also checks the canaries.
for f in CapEff CapPrm CapInh CapAmb; do grep "^$f:" /proc/self/status | grep -qv '0000000000000000$' && echo ESCAPED $f; done; true
