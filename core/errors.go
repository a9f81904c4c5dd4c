package core

import "errors"

// Sentinel errors. Callers test them with errors.Is; every error that
// attnplug returns wraps one of them with the context that produced it.
var (
	// ErrInvalidRequest marks a request that cannot be decided as given: a
	// missing or unknown field value, a negative length, arrays of different
	// lengths, a prefix longer than its sequence.
	ErrInvalidRequest = errors.New("invalid request")

	// ErrUnknownBackend marks a backend name that the asked Backend does not
	// serve.
	ErrUnknownBackend = errors.New("unknown backend")

	// ErrUnavailable marks a backend that exists but cannot answer now: its
	// plugin is missing, crashed, quarantined or shutting down.
	ErrUnavailable = errors.New("backend unavailable")

	// ErrProtocol marks a peer that broke the protocol: a wrong handshake, a
	// version the host does not speak, a malformed or undeclared answer.
	ErrProtocol = errors.New("protocol violation")

	// ErrRefused marks a request the host was not allowed to decide by the
	// fallback rules, for instance under strict mode.
	ErrRefused = errors.New("refused")

	// ErrOverloaded marks a request a server could not take now, for lack
	// of room in the memory it gives requests in flight: retry it later.
	ErrOverloaded = errors.New("overloaded")
)

// invalidValue is the error of a parser: the message names the value, and
// errors.Is(err, ErrInvalidRequest) holds. The decoder that called the
// parser adds the field.
type invalidValue string

func (e invalidValue) Error() string { return string(e) }

func (e invalidValue) Is(target error) bool { return target == ErrInvalidRequest }
