#!/bin/bash
# .device/cb (call1.sh's): the host, gpucheck.test and gen of the tree (B:
# the combine reads the bf16 partials as loaded, 32 registers of loads a
# lane, with their LSEs in one trip; with R's change), gen and plugins of
# R (main with the output rows' helpers, rows_out and row_lse: no change
# in what runs), and the plugins of main (A). Packed with xz -9 -T1, like
# files next to each other.
# Run from the repository root of the tree: bundle1.sh MAIN_CHECKOUT R_CHECKOUT.
set -e
M=${1:?main checkout} R=${2:?R checkout}
D=.device/cb
rm -rf $D && mkdir -p $D/A/plugins $D/R/plugins $D/B/plugins $D/R
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
here=$PWD
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
plugins $D/B/plugins
(cd $R && go build -ldflags "-s -w" -o $here/$D/R/gen ./devkernels/gen && plugins $here/$D/R/plugins)
(cd $M && plugins $here/$D/A/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf cb.tar.xz cb/attnplug cb/gpucheck.test cb/gen cb/R/gen \
  cb/{A,R,B}/plugins/attnplug-backend-fa3 cb/{A,R,B}/plugins/attnplug-backend-dsa)
ls -la .device/cb.tar.xz
