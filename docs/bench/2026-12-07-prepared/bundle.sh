#!/bin/bash
# Builds .device/fl.tar.xz, which call.sh carries, from a clean tree at
# 22dd0d0: the committed build (fl/fr); F, with fold.diff (fl/F: its gen is
# what call.sh uses); and L, with fold.diff and then l.patch (fl/L).
# docs/bench/bundle.sh says what each holds.
d=$(dirname "$0")
exec "$d/../bundle.sh" fl F "$d/fold.diff" L "$d/fold.diff:$d/l.patch"
