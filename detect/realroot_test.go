package detect

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// TestRealRoot prints what Detect sees on this machine. It runs only when
// ATTNPLUG_DETECT_REAL=1, since its result depends on the hardware.
func TestRealRoot(t *testing.T) {
	if os.Getenv("ATTNPLUG_DETECT_REAL") != "1" {
		t.Skip("set ATTNPLUG_DETECT_REAL=1 to run detection on this machine's real root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	cuda, cudaErr := queryCUDA(ctx)
	t.Logf("libcuda query (%v): %+v err=%v", time.Since(start), cuda, cudaErr)
	start = time.Now()
	r, err := Detect(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("detect took %v", time.Since(start))
	for _, d := range r.Devices {
		t.Logf("%s %s cc=%s source=%q usable=%v reason=%q", d.PCIAddress, d.PCIID, d.ComputeCapability, d.ccSource, d.Usable, d.Reason)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.Write(append(b, '\n'))
	if err := WriteTable(os.Stdout, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteDoctor(os.Stdout, Doctor(r)); err != nil {
		t.Fatal(err)
	}
	for _, att := range []string{AttentionMLA, AttentionDSA} {
		s, err := Select(r, SelectOptions{Attention: att})
		t.Logf("select %s: %+v err=%v", att, s, err)
	}
}
