// Package jsonl reads and writes the JSON Lines format of attnplug
// dispatch (docs/dispatch.md): one request object per input line, one
// answer object per output line.
//
// DecodeRequest parses one line into a core.Request with errors that name
// the field and the value; AppendAnswer and AppendError write answers.
// Reader splits a stream into lines with a bounded line length, so that a
// hostile stream cannot make the process hold more than MaxLineBytes of it.
//
// The decoder is written for this one schema: it rejects unknown fields,
// duplicate fields, wrong types, non-integral or out-of-range numbers and
// trailing data, reads null as absent, and allocates only the length
// arrays. It never panics on any input (see FuzzDecodeRequest).
//
// split.go splits JSON without decoding it, for lines that carry more
// than a request (attnplug run's "tensors"): Members and CutMember give an
// object's members as slices of the line, CountElements and EachNumber an
// array's elements, so that a large array is counted before anything is
// allocated for it.
package jsonl
