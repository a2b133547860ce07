"""Drives a program on a pseudo-terminal, the way a person at a terminal would.

Usage: python3 pty_drive.py STEPS_JSON -- PROGRAM ARGS...

STEPS_JSON is a list of steps, each {"send": TEXT} (bytes written to the terminal at once,
like a paste) or {"expect": REGEX, "timeout": SECONDS} (wait until the output so far matches).
Prints everything the program wrote; exits 1 naming the step when an expectation times out,
and with the program's status otherwise.
"""

import json
import os
import pty
import re
import select
import sys
import time


def main() -> int:
    split = sys.argv.index("--")
    steps = json.loads(sys.argv[1])
    argv = sys.argv[split + 1 :]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    seen = b""

    def pump(deadline: float) -> bool:
        nonlocal seen
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
        if not ready:
            return False
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return False
        if not chunk:
            return False
        seen += chunk
        return True

    for number, step in enumerate(steps):
        if "send" in step:
            os.write(fd, step["send"].encode())
            continue
        pattern = re.compile(step["expect"].encode(), re.S)
        deadline = time.time() + step.get("timeout", 20)
        while not pattern.search(seen):
            if time.time() >= deadline or not pump(deadline):
                if time.time() < deadline:
                    time.sleep(0.02)
                    continue
                sys.stdout.write(seen.decode(errors="replace"))
                sys.stdout.write(f"\n[pty_drive] step {number}: no match for {step['expect']!r}\n")
                os.kill(pid, 9)
                return 1
    deadline = time.time() + 30
    while time.time() < deadline and pump(deadline):
        pass
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(seen.decode(errors="replace"))
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
