#!/bin/sh
# Escape attempt: chroot. Prints ESCAPED when it succeeds; the test also checks the canaries.
python3 - <<'EOF'
import os
try:
    os.chroot('/tmp'); print('ESCAPED')
except OSError as e: print(e)
EOF
