package conformance

import (
	"slices"
	"testing"
)

// TestLayersListEveryCheckOnce: the checks of the two layers are values
// with names of their own, listed once each, in the order of the report.
func TestLayersListEveryCheckOnce(t *testing.T) {
	want := []string{
		CheckRunByHand, CheckHandshake, CheckProtocolVersion, CheckDescription,
		CheckKernelCatalog, CheckUnknownName, CheckCoverage, CheckCatalog,
		CheckDeterminism, CheckBatch, CheckReads, CheckBadRequests,
		CheckMutation, CheckLatency, CheckKernels, CheckDeviceCode, CheckDeviceRun,
		CheckStdout,
		CheckProcess,
	}
	if got := CheckNames(); !slices.Equal(got, want) {
		t.Errorf("CheckNames() = %v, want %v", got, want)
	}
	if got := BackendCheckNames(); !slices.Equal(got, want[3:17]) {
		t.Errorf("BackendCheckNames() = %v, want %v", got, want[3:17])
	}
}
