#!/bin/bash
# Call C: where an eager layer's host time goes, part by part.
set -u
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/devB2.tar.xz || exit 1
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python && ATTNPLUG_BIN=$PWD/../bin timeout 200 python3 ../.device/eagerparts.py 2>&1 | tee $OUT/eagerparts.txt | grep -v "^$" | head -120
