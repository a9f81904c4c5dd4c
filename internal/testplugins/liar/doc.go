// Command attnplug-backend-liar is a plugin built only for tests: it serves
// the name "liar", declares device code, hands the host a fake PTX module
// (text made up here whose entries have the declared signatures and only
// return: no NVRTC, no GPU) and plans launches of it that lie
// on command, so that tests can show that the registry and attnplug
// conform refuse every lie, naming it.
//
// The lies come from $ATTNPLUG_LIE, a comma-separated list:
//
//	unknown_entry   a launch names an entry its module lacks
//	unknown_module  a launch names a module the plugin never handed over
//	grid            a grid dimension one past the device's limit
//	block           a block of more threads than the device allows
//	shared          more shared memory per block than the device has
//	unbound         a tensor parameter (lse) left unbound
//	schedule        a split-KV schedule item past its request's keys
//	shape           the output tensor declared one head too wide
//	wrong_kernel    the plan names a kernel its catalog does not run
//	hash            the module declares a SHA-256 that is not its image's
//	swapped_params  the module's Entries declare two parameters of the
//	                combine entry swapped, partial (a pointer, first in the
//	                kernel's signature) and items (an i32, last): the PTX
//	                image has them the other way round
//	no_plan         answer "no device plan" to every plan request
//	no_modules      answer "no device code" to the modules request
//	crash_plan      exit with status 2 in every plan request
//	holds_for_batch a graph plan with a bound on the lengths declares it holds
//	                for the batch size (Reads), but its grid follows the lengths
//	example_plan    the plan of the docs' first device-code example: one
//	                launch over requests x heads binding the batch size and
//	                the scale, neither seq_lens nor qo_indptr, which cannot
//	                know a request's keys with pages of more than one token
//	                nor its query rows in target verify
//	ignores_kv_dtype never read PlanRequest.KVDType, as a plugin built before
//	                it existed: an FP8 request gets the bf16 plan, over the
//	                tensors launch.Tensors gives it (kv_scale among them),
//	                which no launch binds
//	ignores_top_k   never read Dims.TopK: a sparse request gets the dense
//	                plan, over the sparse layout's tensors (topk_indices,
//	                no page table), binding the page table
//	ignores_query_split never read PlanRequest.QuerySplit: a split request
//	                gets the plan of whole queries, over the split layout
//	                (q_nope and q_rope), binding q
//	catalog_fp8     the catalog's kernel lists fp8_e4m3 too, whatever the
//	                plans do (with ignores_kv_dtype: a catalog that claims
//	                what the kernels do not do, so that the host asks)
//	catalog_sparse  the catalog's kernel is sparse, whatever the plans do
//	catalog_split   the catalog's kernel takes split queries, whatever the
//	                plans do
//	image_mib=N     make the module image N MiB
//	variant=V       build the image with V in it (a rebuilt plugin)
//
// With $ATTNPLUG_LIE_LOG naming a file, each KernelModules and PlanKernel
// call appends a line ("modules" or "plan") to it, so that tests count the
// calls that reached the plugin.
//
// Without lies the plans are honest: a split-KV decode over the paged
// cache (keys split in chunks of 256, one block per item and head) and a
// combine launch, within every limit, which the host's check accepts; a
// request the kernel does not cover (core.Kernel.Covers: an FP8 cache, a
// sparse layer, another page size or head dims) gets no plan.
package main
