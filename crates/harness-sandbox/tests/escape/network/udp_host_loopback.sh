#!/bin/sh
# Escape attempt: udp host loopback. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(5): s.sendto(b'escape', ('127.0.0.1', int(os.environ['UDP_PORT'])))
print('sent (must not arrive)')
EOF
