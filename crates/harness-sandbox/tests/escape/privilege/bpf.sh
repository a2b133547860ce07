#!/bin/sh
# Escape attempt: bpf. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
attr = ctypes.create_string_buffer(128)
r = libc.syscall(321, 0, attr, 128)
print('rc', r, ctypes.get_errno())
if r >= 0: print('ESCAPED')
EOF
