#!/bin/sh
# Escape attempt: unshare syscall. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(272, 0x10000000)
print('rc', r, os.strerror(ctypes.get_errno()))
if r >= 0: print('ESCAPED')
EOF
