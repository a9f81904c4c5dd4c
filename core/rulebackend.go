package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// Rule is one named set of dispatch rules: what a plugin registers for
// every name it serves.
type Rule struct {
	// Name is the registry name.
	Name string
	// AliasOf, when set, names the rule this one shares its rules with.
	AliasOf string
	// Deprecated, when set, is logged once (MsgDeprecatedName), the first
	// time the name is asked.
	Deprecated string
	// Decide returns the method for a valid request. It must be pure and
	// read no fact outside Reads.
	Decide func(*Request) Method
	// Reads declares the facts Decide reads.
	Reads Reads
	// Methods lists every method Decide can return.
	Methods []Method
	// Hardware lists what the name's kernels run on; empty: anywhere.
	Hardware []Hardware
	// Kernels is the name's kernel catalog: at most one kernel per method
	// of Methods, those the backend runs; the host runs the others with
	// its reference kernels (HandlerInfo.Catalog).
	Kernels []Kernel
}

// Logger is the logging a RuleBackend needs; hclog.Logger satisfies it.
type Logger interface {
	// Warn logs a message at warning level with key/value pairs.
	Warn(msg string, args ...any)
}

// MsgDeprecatedName is the message a RuleBackend logs the first time a
// deprecated name is asked. A host that routes names warns of them itself,
// once per process, and logs a plugin's line with this message at Debug.
const MsgDeprecatedName = "deprecated backend name"

// RuleBackend is a Backend made of Rules, the usual way to write a plugin.
// It is safe for concurrent use.
type RuleBackend struct {
	desc   Description
	rules  map[string]*ruleEntry
	logger Logger
}

type ruleEntry struct {
	rule Rule
	once sync.Once
}

// RuleBackendOptions are the settings of a RuleBackend besides its rules
// (NewRuleBackendWith). The zero value of each optional field is what
// NewRuleBackend gives.
type RuleBackendOptions struct {
	// Name is the backend's name: for a plugin, the <name> of its binary's
	// file name, attnplug-backend-<name> (Description.Name).
	Name string
	// Version is the backend's own version, semantic (Description.Version).
	Version string
	// Vendor, optional, names who makes and supports the backend, such as
	// "Acme Corp" (Description.Vendor).
	Vendor string
	// Logger, optional, is told the first time a deprecated name is asked.
	Logger Logger
	// DeviceCode declares that the backend hands the host device code
	// (Description.DeviceCode): set it when the type that embeds the
	// RuleBackend is a KernelPlanner. A host asks a plugin for device code
	// only when its description says it has some.
	DeviceCode bool
}

// NewRuleBackend returns a backend named name, at version, serving rules. It
// fails when a name is empty or repeated, a rule has no Decide, or an alias
// points at a name it does not serve. logger may be nil. It is
// NewRuleBackendWith with only the name, version and logger set.
func NewRuleBackend(name, version string, logger Logger, rules ...Rule) (*RuleBackend, error) {
	return NewRuleBackendWith(RuleBackendOptions{Name: name, Version: version, Logger: logger}, rules...)
}

// NewRuleBackendWith returns a backend serving rules, described by opts:
// NewRuleBackend with a vendor, or with device code declared for a type
// that embeds the RuleBackend and plans kernels. It fails as
// NewRuleBackend does.
func NewRuleBackendWith(opts RuleBackendOptions, rules ...Rule) (*RuleBackend, error) {
	name := opts.Name
	b := &RuleBackend{
		desc:   Description{Name: name, Version: opts.Version, Vendor: opts.Vendor, DeviceCode: opts.DeviceCode},
		rules:  make(map[string]*ruleEntry, len(rules)),
		logger: opts.Logger,
	}
	for _, r := range rules {
		switch {
		case r.Name == "":
			return nil, fmt.Errorf("%s: rule with an empty name", name)
		case r.Decide == nil:
			return nil, fmt.Errorf("%s: rule %q has no Decide", name, r.Name)
		case b.rules[r.Name] != nil:
			return nil, fmt.Errorf("%s: rule %q registered twice", name, r.Name)
		}
		b.rules[r.Name] = &ruleEntry{rule: r}
		b.desc.Handlers = append(b.desc.Handlers, HandlerInfo{
			Name: r.Name, AliasOf: r.AliasOf, Deprecated: r.Deprecated, Reads: r.Reads, Methods: r.Methods,
			Hardware: r.Hardware, Kernels: r.Kernels,
		})
	}
	for _, r := range rules {
		if r.AliasOf != "" && b.rules[r.AliasOf] == nil {
			return nil, fmt.Errorf("%s: rule %q is an alias of %q, which is not served", name, r.Name, r.AliasOf)
		}
	}
	return b, nil
}

// Configure refuses a host on which none of the backend's names can run;
// the error wraps ErrRefused and says what each name needs.
func (b *RuleBackend) Configure(_ context.Context, info HostInfo) error {
	var why []string
	for _, h := range b.desc.Handlers {
		ok, reason := SupportsAny(h.Hardware, info)
		if ok {
			return nil
		}
		why = append(why, h.Name+": "+reason)
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s cannot run on this host (%s)", ErrRefused, b.desc.Name, strings.Join(why, "; "))
}

// Describe returns the backend's description.
func (b *RuleBackend) Describe(context.Context) (*Description, error) {
	d := b.desc
	d.Handlers = append([]HandlerInfo(nil), b.desc.Handlers...)
	return &d, nil
}

// Dispatch decides req by the rule named req.Backend.
func (b *RuleBackend) Dispatch(ctx context.Context, req *Request) (Method, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	e := b.rules[req.Backend]
	if e == nil {
		return 0, fmt.Errorf("%s: %w %q", b.desc.Name, ErrUnknownBackend, req.Backend)
	}
	if e.rule.Deprecated != "" && b.logger != nil {
		e.once.Do(func() {
			b.logger.Warn(MsgDeprecatedName, "backend", req.Backend, "use", e.rule.AliasOf, "reason", e.rule.Deprecated)
		})
	}
	return e.rule.Decide(req), nil
}

// DispatchBatch decides every request of reqs into out.
func (b *RuleBackend) DispatchBatch(ctx context.Context, reqs []Request, out []Result) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("%s: dispatch batch: %d results for %d requests", b.desc.Name, len(out), len(reqs))
	}
	for i := range reqs {
		m, err := b.Dispatch(ctx, &reqs[i])
		out[i] = Result{Method: m, Err: err}
	}
	return ctx.Err()
}
