#!/bin/sh
# Escape attempt: tcp host loopback. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket, os
s = socket.socket()
s.settimeout(2)
try:
    s.connect(('127.0.0.1', int(os.environ['TCP_PORT']))); s.send(b'escape'); print('ESCAPED')
except OSError as e: print(e)
EOF
