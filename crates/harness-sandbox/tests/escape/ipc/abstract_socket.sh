#!/bin/sh
# Escape attempt: abstract socket. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket, os
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('\0' + os.environ['ABSTRACT_NAME']); s.send(b'escape'); print('ESCAPED')
except OSError as e: print(e)
EOF
