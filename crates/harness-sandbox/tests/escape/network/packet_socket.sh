#!/bin/sh
# Escape attempt: packet socket. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print('ESCAPED packet')
except OSError as e: print(e)
EOF
