#!/bin/sh
# Escape attempt: harness data dir. Prints ESCAPED when it succeeds; the test also checks the canaries.
ls -la "$DATA_DIR" 2>&1; cat "$DATA_DIR/agent_state.json" 2>&1; echo changed > "$DATA_DIR/agent_state.json" 2>&1 && echo ESCAPED
