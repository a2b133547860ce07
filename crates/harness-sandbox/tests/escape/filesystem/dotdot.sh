#!/bin/sh
# Escape attempt: dotdot. Prints ESCAPED when it succeeds; the test also checks the canaries.
cat ../../../../../../.."$SECRET_FILE" 2>&1
echo changed > ../../../../../../.."$CANARY_FILE" 2>&1 && echo ESCAPED
cd /; cd ..; cd ..; ls 2>&1; cat ."$SECRET_FILE" 2>&1
