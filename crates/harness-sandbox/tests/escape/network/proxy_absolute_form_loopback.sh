#!/bin/sh
# Escape attempt: plain-HTTP absolute-form requests through the proxy to the host's loopback
# canary, by address, by `localhost`, and by other spellings of 127.0.0.1 (none is on the
# allow-list; a name resolving to loopback is refused even when it were). Prints ESCAPED when a
# request gets through.
python3 - <<'PY'
import os, socket
port = os.environ['TCP_PORT']
for host in ['127.0.0.1', 'localhost', 'LOCALHOST.', '[::1]', '[::ffff:127.0.0.1]', '2130706433', '0x7f.1', '127.1', '0.0.0.0']:
    try:
        s = socket.create_connection(('127.0.0.1', 3128), 5)
        s.settimeout(5)
        s.sendall(('GET http://%s:%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % (host, port, host)).encode())
        reply = s.recv(4096).decode(errors='replace')
        first = reply.splitlines()[0] if reply else '(closed)'
        print(host, first)
        if not first.startswith('HTTP/1.1 4') and not first.startswith('HTTP/1.1 5') and first != '(closed)':
            print('ESCAPED via', host)
    except OSError as e:
        print(host, e)
PY
