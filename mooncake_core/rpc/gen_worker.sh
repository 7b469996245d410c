#!/bin/sh
# Regenerate the committed worker stubs (see gen_stubs.sh).
exec sh "$(dirname "$0")/gen_stubs.sh" worker
