#!/bin/sh
# Escape attempt, DNS-rebinding style: CONNECT by names and spellings that land on host
# loopback (`localhost`, IPv4-mapped IPv6, decimal and short forms), uppercase and trailing-dot
# variants, and a Host header that disagrees with the CONNECT authority. Prints ESCAPED when a
# tunnel opens.
python3 - <<'PY'
import os, socket
port = os.environ['TCP_PORT']
targets = ['localhost:%s', 'LocalHost.:%s', '[::ffff:127.0.0.1]:%s', '[::1]:%s', '2130706433:%s', '127.1:%s', '0:%s', 'allowed.test.evil:%s']
for target in targets:
    target = target % port
    try:
        s = socket.create_connection(('127.0.0.1', 3128), 5)
        s.settimeout(5)
        s.sendall(('CONNECT %s HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n' % target).encode())
        reply = s.recv(4096).decode(errors='replace')
        first = reply.splitlines()[0] if reply else '(closed)'
        print(target, first)
        if ' 200 ' in first:
            s.sendall(b'escape'); print('ESCAPED via', target)
    except OSError as e:
        print(target, e)
PY
