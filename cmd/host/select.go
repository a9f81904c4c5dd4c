package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/detect"
)

// selectFlags are the backend selection overrides of the commands that
// choose backends for the detected hardware (detect, and serve). A command
// registers them on its flag set, detects, then calls selectBackends:
//
//	var sf selectFlags
//	sf.register(fs)
//	// parse, then:
//	tp, err := sf.tp()
//	r, err := detect.Detect(ctx, detect.Options{Root: root, TPSize: tp})
//	sel, err := selectBackends(r, &sf, inventory.ServedHardware(reg)) // exit status 1 on error
//	for _, w := range sel.Warnings { logger.Warn(w) }
//
// Precedence, per phase: --prefill-backend/--decode-backend, then
// --backend, then $ATTNPLUG_BACKEND, then the --config file, then the
// detected default (docs/hardware.md).
type selectFlags struct {
	backend        string
	prefillBackend string
	decodeBackend  string
	config         string
	attention      string
	tpSize         setInt
	allowFallback  bool
}

// setInt is an int flag that remembers whether it was given, so that a
// config file's value applies when it was not.
type setInt struct {
	n   int
	set bool
}

// String returns the value given, or "" when none was: the help text
// states the default itself.
func (v *setInt) String() string {
	if v == nil || !v.set {
		return ""
	}
	return fmt.Sprint(v.n)
}

// Set parses the value.
func (v *setInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not an integer: %q", s)
	}
	if n < 1 {
		return fmt.Errorf("%d is not a positive size", n)
	}
	v.n, v.set = n, true
	return nil
}

// register adds the selection flags to fs.
func (s *selectFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.backend, "backend", "", "attention backend for prefill and decode (default $"+detect.EnvBackend+", else the config file, else detected)")
	fs.StringVar(&s.prefillBackend, "prefill-backend", "", "attention backend for prefill; beats --backend")
	fs.StringVar(&s.decodeBackend, "decode-backend", "", "attention backend for decode; beats --backend")
	fs.StringVar(&s.config, "config", "", `JSON config file: {"backend", "prefill_backend", "decode_backend", "tp_size"}`)
	fs.StringVar(&s.attention, "attention", detect.AttentionMLA, "attention kind of the model: mla (DeepSeek-V3/R1) or dsa (DeepSeek-V3.2)")
	s.tpSize = setInt{n: 1}
	fs.Var(&s.tpSize, "tp-size", "tensor-parallel size, which the ROCm default depends on (default the config file's tp_size, else 1)")
	fs.BoolVar(&s.allowFallback, "allow-fallback", false, "let a forced backend this hardware cannot run fall back to triton, with a warning, instead of failing")
}

// loadConfig reads the --config file, or returns nil without one.
func (s *selectFlags) loadConfig() (*detect.Config, error) {
	if s.config == "" {
		return nil, nil
	}
	c, err := detect.LoadConfig(s.config)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("--config: %v", err)}
	}
	return c, nil
}

// tp returns the tensor-parallel size: --tp-size, else the config file's
// tp_size, else 1.
func (s *selectFlags) tp() (int, error) {
	if s.tpSize.set {
		return s.tpSize.n, nil
	}
	c, err := s.loadConfig()
	if err != nil {
		return 0, err
	}
	if c != nil && c.TPSize > 0 {
		return c.TPSize, nil
	}
	return 1, nil
}

// options are the selection options of the flags, $ATTNPLUG_BACKEND and
// the config file; served is what the host's plugins serve
// (inventory.ServedHardware), nil for sglang's names only. An unreadable
// config file is a usage error.
func (s *selectFlags) options(served map[string][]core.Hardware) (detect.SelectOptions, error) {
	c, err := s.loadConfig()
	if err != nil {
		return detect.SelectOptions{}, err
	}
	tp, err := s.tp()
	return detect.SelectOptions{
		Attention: s.attention, Backend: s.backend, PrefillBackend: s.prefillBackend, DecodeBackend: s.decodeBackend,
		Env: os.Getenv(detect.EnvBackend), Config: c, TPSize: tp, AllowFallback: s.allowFallback, Served: served,
	}, err
}

// selectBackends picks the prefill and decode backends for the report's
// hardware with detect.Select (docs/hardware.md): a forced backend the
// hardware cannot run is an error wrapping detect.ErrUnsupportedBackend,
// unless --allow-fallback (triton and a warning to log); an unknown
// backend name or attention kind is a usage error: the user typed them.
func selectBackends(r *detect.Report, f *selectFlags, served map[string][]core.Hardware) (detect.Selection, error) {
	opts, err := f.options(served)
	if err != nil {
		return detect.Selection{}, err
	}
	sel, err := detect.Select(r, opts)
	if errors.Is(err, detect.ErrUnknownBackend) || errors.Is(err, detect.ErrUnknownAttention) {
		return sel, &usageError{err.Error()}
	}
	return sel, err
}
