#!/bin/sh
# Escape attempt: netlink. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket
for proto in (9, 15, 4, 16):
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto); print('ESCAPED netlink', proto)
    except OSError as e: print(proto, e)
socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); print('route netlink allowed')
EOF
