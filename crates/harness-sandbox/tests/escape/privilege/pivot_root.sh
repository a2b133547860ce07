#!/bin/sh
# Escape attempt: pivot root. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(155, b'/tmp', b'/tmp')
print('rc', r, os.strerror(ctypes.get_errno()))
if r >= 0: print('ESCAPED')
EOF
