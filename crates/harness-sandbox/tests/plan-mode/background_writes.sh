#!/bin/sh
# Plan mode: a background job started by a read-only command stays read-only after the
# command returned (the test runs a second read-only command that waits for it). Prints
# ESCAPED when the late write works.
cd /workspace || exit 1
( sleep 0.3; echo late > "$PLAN_FILE" 2>/dev/null && echo ESCAPED late write > /tmp/plan-late ) &
nohup sh -c "sleep 0.3; echo x > late-file && echo ESCAPED nohup > /tmp/plan-nohup" >/dev/null 2>&1 &
sleep 0.6
cat /tmp/plan-late /tmp/plan-nohup 2>/dev/null
echo done
