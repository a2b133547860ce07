#!/bin/sh
# Escape attempt: raw socket. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket
for fam in (socket.AF_INET, socket.AF_INET6):
    try:
        socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_ICMP); print('ESCAPED raw')
    except OSError as e: print(e)
EOF
