#!/bin/sh
# Escape attempt: environment. Prints ESCAPED when it succeeds; the test also checks the canaries.
env; set
