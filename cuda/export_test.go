package cuda

import "github.com/attnplug/attnplug/kernels"

// Test hooks.
var (
	MLAPTX           = mlaPTX
	MLAPTXSourceHash = mlaPTXSourceHash
)

// OpenEmbeddedPTX opens device 0 with NVRTC skipped, so that RunMLA loads the embedded PTX.
func OpenEmbeddedPTX() (*Device, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	err = d.do(func() error { d.forceEmbedded = true; return nil })
	return d, err
}

// Validate is RunMLA's argument check.
func Validate(cfg kernels.Config, b kernels.BatchShape, t kernels.Tensors, out []float32) error {
	return validate(cfg, b, &t, out)
}
