#!/bin/sh
# Escape attempt: reach a host that is not on the allow-list, with curl through the configured
# proxy, and with the proxy variables removed. Prints ESCAPED when a connection is made.
out=$(curl -sS -m 5 -o /dev/null -w '%{http_code}' https://example.com/ 2>&1)
echo "curl via proxy: $out"
case "$out" in 2*|3*) echo ESCAPED via proxy ;; esac
out=$(env -u https_proxy -u HTTPS_PROXY -u http_proxy -u HTTP_PROXY curl -sS -m 5 -o /dev/null -w '%{http_code}' https://93.184.215.14/ 2>&1)
echo "curl direct: $out"
case "$out" in 2*|3*) echo ESCAPED directly ;; esac
