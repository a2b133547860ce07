#!/bin/sh
# Escape attempt: clone3 falls back. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(435, None, 0)
print('rc', r, ctypes.get_errno())
if ctypes.get_errno() != 38: print('ESCAPED clone3 not ENOSYS')
EOF
