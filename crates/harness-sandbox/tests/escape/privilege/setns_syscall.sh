#!/bin/sh
# Escape attempt: setns syscall. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open('/proc/self/ns/net', os.O_RDONLY)
r = libc.setns(fd, 0)
print('rc', r)
if r == 0: print('ESCAPED')
EOF
