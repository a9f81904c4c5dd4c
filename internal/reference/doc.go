// Package reference runs sglang's own dispatch code, the Python file that
// attnplug reproduces, on dispatch requests, so that tests can compare
// attnplug's answers with the reference's on many generated requests.
//
// It needs python3 and the reference file (../shared/reference beside the
// repository, or $ATTNPLUG_REFERENCE); tests skip, saying why, without
// them. Generate makes random valid requests that reach every branch and
// every equality edge of the rules.
package reference
