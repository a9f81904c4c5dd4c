#!/bin/bash
# Builds .device/nx.tar.xz, which call.sh carries: the committed build
# (nx/fr) and V, with v.patch (nx/V); docs/bench/bundle.sh says what each
# holds.
exec "$(dirname "$0")/../bundle.sh" nx V "$(dirname "$0")/v.patch"
