#!/bin/sh
# Escape attempt: ptrace sibling. Prints ESCAPED when it succeeds; the test also checks the canaries.
sleep 30 & pid=$!
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ['SIB'])
r = libc.syscall(101, 16, pid, 0, 0)
print('rc', r)
if r == 0: print('ESCAPED')
EOF
kill $pid
