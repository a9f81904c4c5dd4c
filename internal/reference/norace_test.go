//go:build !race

package reference_test

// raceDetector is whether the tests run under the race detector.
const raceDetector = false
