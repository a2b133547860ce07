#!/bin/sh
# Plan mode: every shell way of changing the work tree must fail. $PLAN_FILE is a file in the
# work tree whose content must stay "plan\n"; prints ESCAPED for each write that works.
cd /workspace || exit 1
echo x > "$PLAN_FILE" 2>/dev/null && echo ESCAPED overwrite
echo x >> "$PLAN_FILE" 2>/dev/null && echo ESCAPED append
: > "$PLAN_FILE" 2>/dev/null && echo ESCAPED truncate
touch new-file 2>/dev/null && echo ESCAPED create
mkdir new-dir 2>/dev/null && echo ESCAPED mkdir
ln -s "$PLAN_FILE" new-link 2>/dev/null && echo ESCAPED symlink
ln "$PLAN_FILE" new-hardlink 2>/dev/null && echo ESCAPED hardlink
mkfifo new-fifo 2>/dev/null && echo ESCAPED mkfifo
mv "$PLAN_FILE" moved 2>/dev/null && echo ESCAPED rename
rm -f "$PLAN_FILE" 2>/dev/null && [ ! -e "$PLAN_FILE" ] && echo ESCAPED remove
rmdir sub 2>/dev/null && echo ESCAPED rmdir
cp /etc/hostname "$PLAN_FILE" 2>/dev/null && echo ESCAPED cp
sh -c "echo x > $PLAN_FILE" 2>/dev/null && echo ESCAPED nested shell
setsid sh -c "echo x > $PLAN_FILE" 2>/dev/null && echo ESCAPED new session
echo reads: "$(cat "$PLAN_FILE")"
