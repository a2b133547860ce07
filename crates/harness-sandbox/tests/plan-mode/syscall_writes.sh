#!/bin/sh
# Plan mode: system-call level writes (open flags, rename, link, reopening a read-only
# descriptor for writing through /proc/self/fd, truncate) must fail. Prints ESCAPED for each.
cd /workspace || exit 1
python3 - <<'PY'
import os
f = os.environ['PLAN_FILE']
def attempt(label, action):
    try:
        action(); print('ESCAPED', label)
    except OSError as e:
        print(label, e.errno)
attempt('open O_WRONLY', lambda: os.close(os.open(f, os.O_WRONLY)))
attempt('open O_RDWR', lambda: os.close(os.open(f, os.O_RDWR)))
attempt('open O_CREAT', lambda: os.close(os.open('created', os.O_CREAT | os.O_WRONLY, 0o644)))
attempt('truncate', lambda: os.truncate(f, 0))
attempt('rename', lambda: os.rename(f, 'renamed'))
attempt('link', lambda: os.link(f, 'linked'))
attempt('symlink', lambda: os.symlink(f, 'symlinked'))
attempt('mkdir', lambda: os.mkdir('made'))
attempt('unlink', lambda: os.unlink(f))
fd = os.open(f, os.O_RDONLY)
attempt('reopen through /proc/self/fd', lambda: os.close(os.open('/proc/self/fd/%d' % fd, os.O_WRONLY)))
attempt('mknod', lambda: os.mknod('node', 0o600 | 0o010000))
print('read', open(f).read().strip())
PY
