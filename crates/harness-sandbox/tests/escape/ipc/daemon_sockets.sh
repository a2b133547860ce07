#!/bin/sh
# Escape attempt: daemon sockets. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import socket
for path in ('/var/run/docker.sock', '/run/docker.sock', '/run/dbus/system_bus_socket', '/run/systemd/private', '/tmp/.X11-unix/X0'):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); print('ESCAPED', path)
    except OSError as e: print(path, e)
EOF
