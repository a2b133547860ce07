#!/bin/sh
# Escape attempt: io uring. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
r = libc.syscall(425, 8, params)
print('rc', r)
if r >= 0: print('ESCAPED')
EOF
