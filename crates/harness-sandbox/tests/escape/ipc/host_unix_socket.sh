#!/bin/sh
# Escape attempt: host unix socket. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket, os
for path in (os.environ['HOST_SOCKET'],):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); s.send(b'escape'); print('ESCAPED')
    except OSError as e: print(e)
EOF
