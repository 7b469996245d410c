#!/bin/sh
# Regenerate the committed store stubs (see gen_stubs.sh).
exec sh "$(dirname "$0")/gen_stubs.sh" store
