#!/bin/sh
# Escape attempt: process vm readv. Prints ESCAPED when it succeeds; the test also checks the canaries.
sleep 30 & pid=$!
python3 - <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(os.environ['SIB'])
buf = ctypes.create_string_buffer(16)
class iov(ctypes.Structure): _fields_=[('b',ctypes.c_void_p),('l',ctypes.c_size_t)]
l = iov(ctypes.cast(buf, ctypes.c_void_p), 16); r = iov(0x400000, 16)
n = libc.syscall(310, pid, ctypes.byref(l), 1, ctypes.byref(r), 1, 0)
print('rc', n)
if n > 0: print('ESCAPED')
EOF
kill $pid
