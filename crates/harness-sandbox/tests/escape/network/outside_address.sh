#!/bin/sh
# Escape attempt: outside address. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket
s = socket.socket()
s.settimeout(2)
try:
    s.connect(('198.51.100.7', 80)); print('ESCAPED')
except OSError as e: print(e)
EOF
