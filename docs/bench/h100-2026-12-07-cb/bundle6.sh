#!/bin/bash
# .device/cb6 (call6.sh's): the host, plugins and gpucheck.test of the
# tree, with call 5's images in devkernels/images (C), and the plugins of
# main (A). Packed with xz -9 -T1.
# Run from the repository root of the tree: bundle6.sh MAIN (checkout).
set -e
M=${1:?main}
D=.device/cb6
rm -rf $D && mkdir -p $D/{A,C}/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
here=$PWD
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
plugins $D/C/plugins
(cd $M && plugins $here/$D/A/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf cb6.tar.xz cb6/attnplug cb6/gpucheck.test \
  cb6/{A,C}/plugins/attnplug-backend-fa3 cb6/{A,C}/plugins/attnplug-backend-dsa)
ls -la .device/cb6.tar.xz
