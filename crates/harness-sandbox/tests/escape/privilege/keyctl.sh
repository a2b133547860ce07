#!/bin/sh
# Escape attempt: keyctl. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(248, b'user', b'x', b'payload', 7, -2)
print('add_key', r)
if r >= 0: print('ESCAPED')
r = libc.syscall(250, 0, -3, 0)
print('keyctl', r)
if r >= 0: print('ESCAPED')
EOF
