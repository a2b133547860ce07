#!/bin/sh
# Escape attempt: vsock. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket
try:
    s = socket.socket(40, socket.SOCK_STREAM); print('ESCAPED vsock')
except OSError as e: print(e)
EOF
