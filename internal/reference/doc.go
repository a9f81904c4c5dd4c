// Package reference runs sglang's own dispatch code, the Python file that
// attnplug reproduces, on dispatch requests, so that tests can compare
// attnplug's answers with the reference's on many generated requests.
// attnplug bench links it too (through internal/hostbench): its varied
// stream is Generate's, and it times the oracle (Find) on that stream.
//
// The oracle needs python3 and the reference file ($ATTNPLUG_REFERENCE,
// else shared/reference beside the repository or above it). Generate
// makes random valid requests that reach every branch and every equality
// edge of the rules.
//
// testdata/golden.jsonl.gz holds 40 000 generated requests with the
// answers sglang's code gave them (ReadGolden): the tests compare attnplug
// with it on every run, so fidelity is checked on a fresh clone too. Where
// the oracle is available the tests also check that the golden file is
// current and compare with the code live on fresh requests; without it
// those tests skip, saying why. `make golden` (go generate
// ./internal/reference, command gengolden) writes the file again.
package reference

//go:generate go run ./gengolden -o testdata/golden.jsonl.gz
