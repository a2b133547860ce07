#!/bin/sh
# Escape attempt: perf event open. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
attr = ctypes.create_string_buffer(128)
attr[4] = 128
r = libc.syscall(298, attr, 0, -1, -1, 0)
print('rc', r)
if r >= 0: print('ESCAPED')
EOF
