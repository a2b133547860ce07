#!/bin/sh
# Escape attempt: remount root. Prints ESCAPED when it succeeds; the test also checks the canaries.
mount -o remount,rw / 2>&1 && echo ESCAPED
mount -o remount,rw,bind /usr 2>&1 && touch /usr/escape-marker 2>&1 && echo ESCAPED
