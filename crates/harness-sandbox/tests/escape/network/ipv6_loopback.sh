#!/bin/sh
# Escape attempt: ipv6 loopback. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket, os
s = socket.socket(socket.AF_INET6)
s.settimeout(2)
try:
    s.connect(('::1', int(os.environ['TCP_PORT']))); print('ESCAPED')
except OSError as e: print(e)
EOF
