package core

import "context"

// Backend is what a plugin implements and what the registry resolves names
// to: a set of named dispatch rules. The triton fallback is a Backend, and so
// is the client side of every plugin connection.
//
// Implementations must be safe for concurrent use: the host calls them from
// many goroutines at once.
type Backend interface {
	// Describe returns what the backend serves: the names it answers, the
	// facts each name's rules read, and the backend's version. The host calls
	// it once after starting the backend and may cache the answer by the
	// binary's hash, so the answer must not change while the binary does not.
	Describe(ctx context.Context) (*Description, error)

	// Dispatch returns the forward method that the rules of req.Backend give
	// for req. The host calls it with a request that passed
	// Request.Validate and whose Runtime.Platform is set. It returns an
	// error wrapping ErrUnknownBackend for a name it does not serve, and
	// must return promptly when ctx is done.
	Dispatch(ctx context.Context, req *Request) (Method, error)
}

// BatchBackend is a Backend that can also answer many requests in one call.
// Hosts use it, when a backend has it, to answer what is already waiting
// without one round trip per request.
type BatchBackend interface {
	Backend

	// DispatchBatch answers reqs[i] into out[i] for every i; len(out) must be
	// len(reqs). A request that fails gets its error in out[i].Err and does
	// not fail the others; the returned error is for the call as a whole
	// (transport, cancellation), after which out is not meaningful.
	DispatchBatch(ctx context.Context, reqs []Request, out []Result) error
}

// Result is the answer to one request of a batch.
type Result struct {
	// Method is the decided method, valid when Err is nil.
	Method Method
	// Err is why the request was not decided.
	Err error
}

// Description is what a Backend says of itself.
type Description struct {
	// Name is the backend's name, such as "fa3"; for a plugin, the family
	// name its binary is called after.
	Name string
	// Version is the backend's own version (semantic versioning).
	Version string
	// ProtocolVersion is the plugin protocol version it speaks; zero for a
	// backend in the host's process.
	ProtocolVersion int
	// Handlers lists the names the backend answers.
	Handlers []HandlerInfo
	// DeviceCode reports that the backend hands the host device code and
	// launch plans (KernelPlanner).
	DeviceCode bool
	// Vendor, optional, names who makes and supports the backend, such as
	// "Acme Corp": attnplug plugins and attnplug conform show it. Empty
	// says nothing (every plugin older than the field).
	Vendor string
}

// HandlerInfo describes one name a Backend answers.
type HandlerInfo struct {
	// Name is the registry name, matched exactly.
	Name string
	// AliasOf, when set, names the handler whose rules this name shares.
	AliasOf string
	// Deprecated, when set, says why the name should no longer be used.
	Deprecated string
	// Reads declares the request facts the name's rules read. A host may
	// cache answers by those facts, so a rule must never read more.
	Reads Reads
	// Methods lists every method the name's rules can answer; an answer
	// outside it is a protocol violation.
	Methods []Method
	// Hardware lists what the name's kernels run on (any entry); empty
	// means anywhere. Deciding a method never needs the hardware: a host
	// uses this to start only the plugins its hardware can run.
	Hardware []Hardware
	// Kernels is the name's kernel catalog: the kernel it runs for each
	// method of Methods that it covers, at most one per method
	// (core/kernel.go). It may cover a subset: the host runs the declared
	// methods it lacks with its own reference kernels (Catalog,
	// HostReferenceKernel). Empty for a backend that runs no kernels (a
	// plugin older than the catalog).
	Kernels []Kernel
}

// Handler returns the entry for name, and whether there is one.
func (d *Description) Handler(name string) (HandlerInfo, bool) {
	for _, h := range d.Handlers {
		if h.Name == name {
			return h, true
		}
	}
	return HandlerInfo{}, false
}

// Answer is a host's full answer to a Request: the method and who decided.
type Answer struct {
	// Method is the decided forward method.
	Method Method
	// Handler is the registry name whose rules decided ("triton" when the
	// name fell back).
	Handler string
	// Plugin is the plugin that answered, or PluginCore for the in-process
	// triton rules.
	Plugin string
	// Fallback, when not empty, says why the triton rules decided although
	// a plugin serves the name.
	Fallback string
}

// BatchAnswer is the answer to one request of a batch (a host's
// DispatchBatch, in process or over the engine API): the host's answer
// (method, handler, plugin, fallback) or why there is none. (Result is a
// backend's answer, a method alone.)
type BatchAnswer struct {
	// Answer is valid when Err is nil.
	Answer Answer
	// Err is why the request was not decided.
	Err error
}

// PluginCore is the Answer.Plugin of the in-process triton fallback.
const PluginCore = "core"
