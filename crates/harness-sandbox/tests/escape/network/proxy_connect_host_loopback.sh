#!/bin/sh
# Escape attempt: ask the proxy (through the in-sandbox relay and through its Unix socket
# directly) to CONNECT to the host's loopback canary listener, which is not on the allow-list.
# Offline sandboxes have no proxy at all; both must refuse. Prints ESCAPED when a tunnel opens.
python3 - <<'PY'
import os, socket
port = os.environ['TCP_PORT']
def ask(connect, label):
    try:
        s = connect()
        s.settimeout(5)
        s.sendall(('CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n' % (port, port)).encode())
        reply = s.recv(4096).decode(errors='replace')
        print(label, reply.splitlines()[0] if reply else '(closed)')
        if reply.startswith('HTTP/1.1 200') or reply.startswith('HTTP/1.0 200'):
            s.sendall(b'escape'); print('ESCAPED via', label)
    except OSError as e:
        print(label, e)
def relay():
    return socket.create_connection(('127.0.0.1', 3128), 5)
def unix():
    s = socket.socket(socket.AF_UNIX); s.connect('/.harness-proxy/proxy.sock'); return s
ask(relay, 'relay')
ask(unix, 'socket')
PY
