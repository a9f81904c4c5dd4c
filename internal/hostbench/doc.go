// Package hostbench is the measurement of attnplug bench: a DeepSeek-V3
// serving trace replayed through a backend name by the rules in process,
// with one gRPC call per layer and by the production path (Pass), each
// answer checked against the rules; the plugins' cold start and memory;
// the first answer of a new attnplug dispatch process; and a varied
// request stream through the dispatch pipeline (engine.Stream), a new
// process and sglang's own Python code when it is found. Run measures and
// returns a Result, whose JSON field names are attnplug bench --json's
// output. Speed is reported as ratios against what the same run measured.
package hostbench
