#!/bin/bash
# bundle.sh: .device/pk with the host and B's plugins, gpucheck.test and gen
# (the working tree: the packed cut), and A's plugins (HEAD, via git stash).
set -e
cd "$(git rev-parse --show-toplevel)"
D=.device/pk
rm -rf $D && mkdir -p $D/A/plugins $D/B/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w -X main.version=B" -o $D/attnplug ./cmd/host
plugins $D/B/plugins
go test -c -ldflags "-s -w" -o $D/B/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/B/gen ./devkernels/gen
git stash -q
trap 'git stash pop -q' EXIT
plugins $D/A/plugins
git stash pop -q; trap - EXIT
tar -C .device -I 'xz -9 -T2' -cf .device/pk.tar.xz pk
ls -la .device/pk.tar.xz
