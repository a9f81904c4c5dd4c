#!/bin/bash
# Builds .device/nq.tar.xz, which call.sh carries: the committed build
# (nq/fr); Q, with q.patch (nq/Q); and VQ, with the seesaw's V
# (../2026-12-07-next/v.patch) and then q.patch (nq/VQ), for its images
# should both land. docs/bench/bundle.sh says what each holds.
d=$(dirname "$0")
exec "$d/../bundle.sh" nq Q "$d/q.patch" VQ "$d/../2026-12-07-next/v.patch:$d/q.patch"
