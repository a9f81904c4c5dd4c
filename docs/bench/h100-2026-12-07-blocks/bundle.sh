#!/bin/bash
# Builds .device/bl.tar.xz, which call.sh carries: the committed build
# (bl/fr) and C, with c.patch (bl/C); docs/bench/bundle.sh says what each
# holds.
exec "$(dirname "$0")/../bundle.sh" bl C "$(dirname "$0")/c.patch"
