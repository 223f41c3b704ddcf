// The C interface between libfsdpskip.so (the preload: glibc only, no torch,
// no C++ runtime) and libfsdpskip_torch.so (the plugin: built against one
// libtorch). What crosses it:
//   - the preload's decision (fsdpskip_host), owned and rewritten by the
//     preload, read by the plugin, with the one message sink both write to;
//   - calls from the interposers into the plugin (fsdpskip_plugin), which
//     pass torch objects as raw pointers: at::Tensor*, at::TensorBase*,
//     c10::TensorImpl*, c10::Scalar*, std::vector<at::Tensor>*, owned by
//     torch, valid for the call only, never copied or kept by the preload;
//   - verdicts back: what the interposer does with the call.
// Every callback may be called on any thread, concurrently. None throws (the
// preload has no C++ runtime to unwind through): a callback that fails
// inside (an allocation) counts an internal error, says so once, and answers
// as its comment says, so that the call then runs as without fsdpskip.
#ifndef FSDPSKIP_PLUGIN_ABI_H
#define FSDPSKIP_PLUGIN_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bump on any change below; both sides check it. From ABI 4 on, `abi` and
// `say` are the first two members of fsdpskip_host in every version, so a
// plugin can say that it was built for another ABI.
#define FSDPSKIP_PLUGIN_ABI 16  // 16: watch_draws; 15: nccl_transfer, the owing word names a lone owing generator
#define FSDPSKIP_TEXT_OF_(x) #x
#define FSDPSKIP_TEXT_OF(x) FSDPSKIP_TEXT_OF_(x)
// As text: the plugin's identity section carries it ("abi=" and this number), so a plugin
// of another ABI is passed over before it is loaded.
#define FSDPSKIP_PLUGIN_ABI_TEXT FSDPSKIP_TEXT_OF(FSDPSKIP_PLUGIN_ABI)

// The plugin records the libtorch it was built against in an ELF section of
// this name (torch_identity.h), so the preload can compare it with the loaded
// libtorch *before* dlopen: loading a plugin linked to another libtorch would
// map a second copy.
#define FSDPSKIP_TORCH_ID_SECTION ".fsdpskip_torch_id"

// Kernels the plugin counts, one row each in kernels.def (part of this
// ABI); the hook table maps symbols to them.
typedef enum fsdpskip_kernel {
  FSDPSKIP_NO_KERNEL = -1,  // a hook-table row that only notifies (hooks.def); never passed to the plugin
#define KERNEL(id, name, role) FSDPSKIP_##id,
#include "kernels.def"
#undef KERNEL
  FSDPSKIP_KERNEL_COUNT
} fsdpskip_kernel;

#define FSDPSKIP_OWING_SLOTS 4
#define FSDPSKIP_OWING_ANY ((void*)1)
// After the slots, one word: who owes (fsdpskip_host's owing_generators).
#define FSDPSKIP_OWING_WORDS (FSDPSKIP_OWING_SLOTS + 1)

// What a kernel's call on a skipped storage means (kernels.def's role).
typedef enum fsdpskip_kernel_role {
  FSDPSKIP_ROLE_NONE,  // FSDPSKIP_NO_KERNEL
  FSDPSKIP_ROLE_INIT,
  FSDPSKIP_ROLE_STEP,
  FSDPSKIP_ROLE_READ
} fsdpskip_kernel_role;

#ifdef __cplusplus
constexpr
#else
static inline
#endif
fsdpskip_kernel_role fsdpskip_role_of(fsdpskip_kernel kernel) {
  switch (kernel) {
#define KERNEL(id, name, role) \
  case FSDPSKIP_##id:          \
    return FSDPSKIP_ROLE_##role;
#include "kernels.def"
#undef KERNEL
    default:
      return FSDPSKIP_ROLE_NONE;
  }
}

typedef enum fsdpskip_mode { FSDPSKIP_MODE_ON = 1, FSDPSKIP_MODE_AUDIT = 2 } fsdpskip_mode;

// FSDPSKIP_LOG, in the order of its accepted words (options.def).
typedef enum fsdpskip_log_level {
  FSDPSKIP_LOG_QUIET,
  FSDPSKIP_LOG_SUMMARY,
  FSDPSKIP_LOG_DEBUG,
  FSDPSKIP_LOG_TRACE
} fsdpskip_log_level;

// FSDPSKIP_STACKS, in the order of its accepted words (options.def).
typedef enum fsdpskip_stacks {
  FSDPSKIP_STACKS_PYTHON,  // the Python frames of the skip, then the native ones
  FSDPSKIP_STACKS_NATIVE,
  FSDPSKIP_STACKS_OFF
} fsdpskip_stacks;

// FSDPSKIP_ON_PENDING, in the order of its accepted words (options.def):
// what training's first collective does about storages still pending.
typedef enum fsdpskip_on_pending { FSDPSKIP_ON_PENDING_WARN, FSDPSKIP_ON_PENDING_ABORT } fsdpskip_on_pending;

// What a line on stderr is; the sink (src/preload/log.cc) holds, per kind,
// the least FSDPSKIP_LOG that prints it, its label and its cap.
typedef enum fsdpskip_message {
  FSDPSKIP_MESSAGE_ERROR,    // the user must see it (a malformed variable)
  FSDPSKIP_MESSAGE_WARNING,  // fsdpskip cannot act as asked (no plugin, no broadcast seen)
  FSDPSKIP_MESSAGE_SUMMARY,  // the summary at exit
  FSDPSKIP_MESSAGE_ADVICE,   // what to check, after the summary (no broadcast was seen)
  FSDPSKIP_MESSAGE_PENDING,  // one storage still pending at exit
  FSDPSKIP_MESSAGE_PENDING_IN_TRAINING,  // one storage still pending when training began
  FSDPSKIP_MESSAGE_DEBUG,    // decisions, tags, skips
  FSDPSKIP_MESSAGE_TRACE,    // every decision on a kernel call
} fsdpskip_message;

// What the interposer does with one kernel call.
typedef enum fsdpskip_verdict {
  FSDPSKIP_RUN,          // run the original kernel
  FSDPSKIP_SKIP,         // run it on stand-ins only (its argument checks), then skipped()
  FSDPSKIP_AUDIT,        // it would be skipped: run it, time it, then audited()
  FSDPSKIP_RUN_NOTIFY,   // copy_: run it, then copied() (it may resolve the destination)
  FSDPSKIP_ZERO_LAZILY,  // zero_, fill_(+0): run it on a stand-in, then zero_lazily() does it exactly
  FSDPSKIP_VERDICT_COUNT
} fsdpskip_verdict;

// A skipped call's arguments, kept so that the call can be run after all
// (its replay) when its storage is about to be sent to another rank.
typedef struct fsdpskip_call_arguments {
  double first, second;  // normal_'s mean and std, uniform_'s from and to
  // fill_'s value (FSDPSKIP_FILL: a c10::Scalar* when scalar is true, else an
  // at::Tensor*); copy_'s source (an at::Tensor*); else NULL
  const void* value;
  bool scalar;
  // A chain step's structured impl's arguments before out: its self
  // (at::Tensor*), then mul_'s other (at::Tensor*); add_'s other
  // (at::Tensor*) and alpha (c10::Scalar*); clamp_'s min and max
  // (c10::Scalar*, NULL when absent).
  const void* operands[3];
} fsdpskip_call_arguments;

// What a call of NCCL's C API moves (fsdpskip_nccl_call's transfer).
typedef enum fsdpskip_transfer {
  FSDPSKIP_TRANSFER_BROADCAST,  // the root's data to every other rank of the communicator
  FSDPSKIP_TRANSFER_SEND,       // this rank's data to a peer
  FSDPSKIP_TRANSFER_RECEIVE,    // a peer's data into this rank's memory
} fsdpskip_transfer;

// One call of NCCL's C API, read from its arguments.
typedef struct fsdpskip_nccl_call {
  const char* name;  // "ncclBcast", ...
  fsdpskip_transfer transfer;
  const void* send;  // what leaves this rank where it sends (a broadcast's root, a send)
  void* receive;     // what a peer's data writes where it receives
  size_t bytes;      // of each; 0 for a datatype the preload does not know
  int root;          // a broadcast's root, as a rank of the communicator; else -1
  int rank;          // a broadcast's: this rank's place in the communicator (ncclCommUserRank); else, or
                     // when it cannot be told, -1
} fsdpskip_nccl_call;

// The preload's current decision. The preload owns it and rewrites it under
// its own lock whenever the program changes a policy variable (setenv,
// os.environ), then calls the plugin's policy_changed().
typedef struct fsdpskip_host {
  uint32_t abi;
  // Writes one message (no newline) to stderr through the preload's sink:
  // the "fsdpskip: " prefix, the level filter and the caps are there.
  void (*say)(fsdpskip_message kind, const char* text);
  bool active;  // false: no new tags or skips; skipped storages still resolve
  fsdpskip_mode mode;
  fsdpskip_log_level log_level;
  fsdpskip_stacks stacks;
  fsdpskip_on_pending on_pending;
  int local_rank;
  int rank;                     // -1 when unknown
  int world_size;               // the job's ranks, -1 when unknown
  int local_world_size;         // this node's ranks, -1 when unknown
  const char* report_template;  // FSDPSKIP_REPORT, or NULL
  // FSDPSKIP_OWING_WORDS words of the preload's: in FSDPSKIP_OWING_SLOTS
  // slots, the CPU generators that owe a skipped init's draws now (NULL:
  // empty; FSDPSKIP_OWING_ANY, in the last: more than the others hold),
  // then a word that says who does: NULL, none; FSDPSKIP_OWING_ANY,
  // several (read the slots); any other value, that generator alone. The
  // plugin writes them, with release stores; the preload's draw forwarders
  // (CPUGeneratorImpl::random and random64, which every draw of every
  // kernel passes through) test the last word, and tell generator_touched
  // only of a draw from a generator that owes.
  void** owing_generators;
  // Whether libtorch_cpu's own draws pass those forwarders (true) or go to
  // torch directly (false: nothing owes), src/preload/draw_slots.h. The
  // plugin calls it under its lock: with true before a first debt begins
  // (holding that generator's mutex), with false once none is left.
  void (*watch_draws)(bool watched);
} fsdpskip_host;

// The plugin's callbacks, called by the interposers (src/preload/interposers.cc)
// of a process whose decision is active, or was and loaded the plugin.
// Pointers are never NULL unless a comment says so.
typedef struct fsdpskip_plugin {
  uint32_t abi;
  // normal_, uniform_, zero_, fill_(Tensor) on `self` (at::Tensor*), before
  // the kernel runs: SKIP for a placeholder's init, ZERO_LAZILY for an exact
  // zero_ done without committing pages, AUDIT in audit mode, else RUN (also
  // when it fails: every decide_* answers RUN then). `generator` is normal_'s
  // and uniform_'s optional<at::Generator> argument, NULL for the others.
  fsdpskip_verdict (*decide_init)(fsdpskip_kernel kernel, void* self, const void* generator);
  // fill_(self, value) with a c10::Scalar*: decide_init, where a fill with +0
  // is a zero_.
  fsdpskip_verdict (*decide_fill)(void* self, const void* scalar);
  // copy_(dst, src), both at::Tensor*: SKIP when src is a skipped storage
  // during loading (a conversion stays skipped); RUN_NOTIFY when the copy may
  // resolve dst; else RUN.
  fsdpskip_verdict (*decide_copy)(void* dst, const void* src);
  // A chain step (a kernel of role STEP: its structured impl, writing `out`
  // from `self`, at::Tensor*, `arguments` holding its operands): SKIP when
  // it rewrites a skipped storage in place while loading, with scalar
  // operands (AUDIT in audit mode); else RUN, after what it reads and
  // writes is materialized.
  fsdpskip_verdict (*decide_chain)(fsdpskip_kernel kernel, const void* self, const void* out,
                                   const fsdpskip_call_arguments* arguments);
  // Before a comparison with a scalar, `|` or any() (structured impl:
  // kernel FSDPSKIP_LT/LE/GT/GE with `other` a c10::Scalar*, FSDPSKIP_OR
  // with `other` an at::Tensor*, FSDPSKIP_ANY with `other` NULL) reads
  // `self` (at::Tensor*) and, for `|`, other: a skipped storage among them
  // is materialized first (trunc_normal_'s rejection test from torch 2.12),
  // outside a fault handler. The kernel then runs.
  void (*reading)(fsdpskip_kernel kernel, const void* self, const void* other);
  // A zero-element tensor with self's dtype and device (an at::Tensor*
  // owned by the plugin, one per slot 0 or 1 and thread, valid until the
  // next call with that slot): a SKIP or ZERO_LAZILY verdict runs the
  // original on it, so a call torch would reject raises what it would raise.
  // NULL when it cannot be made: the interposer then runs the kernel on self.
  void* (*stand_in_like)(const void* self, int slot);
  // A copy of normal_'s or uniform_'s generator argument (an
  // optional<at::Generator>* owned by the plugin, one per thread, valid until
  // the next call) for the stand-in run, since the original may move from the
  // argument it is given, which skipped() and a run on self still need. NULL
  // when it cannot be made: the interposer then runs the kernel on self.
  void* (*stand_in_generator)(const void* generator);
  // After a SKIP (or a chain step's SKIP, which runs nothing): count the
  // call, record the storage as pending with the call and its `arguments`,
  // guard its pages and, for normal_ and uniform_ (`generator` as in
  // decide_init, else NULL), advance their generator by the draws the
  // kernel would have made. False
  // when it failed, leaving nothing recorded: the interposer then runs the
  // kernel on self, so a storage is never left neither initialised nor pending.
  bool (*skipped)(fsdpskip_kernel kernel, void* self, const void* generator, const fsdpskip_call_arguments* arguments);
  // After a ZERO_LAZILY: zero `self` exactly, releasing whole pages. False
  // when it failed: the interposer then runs the kernel on self.
  bool (*zero_lazily)(void* self);
  // After an AUDIT verdict's kernel ran in `nanoseconds`.
  void (*audited)(fsdpskip_kernel kernel, void* self, uint64_t nanoseconds);
  // After a RUN_NOTIFY copy_ ran (at::Tensor*): it may resolve dst.
  void (*copied)(void* dst, const void* src);
  // After c10::TensorImpl::set_requires_grad(true) succeeded on
  // `tensor_impl` (c10::TensorImpl*): a parameter is being made; tag it.
  void (*requires_grad_set)(void* tensor_impl);
  // After `param.data = t` (at::TensorBase::set_data) on `self`
  // (at::TensorBase*): the parameter has a new storage; tag it.
  void (*data_set)(void* self);
  // Before at::CPUGeneratorImpl's get_state (reads) or set_current_seed,
  // seed and set_state (its state replaced) on `generator` (the call's
  // this), whose caller holds its mutex_: a skipped init's draws the
  // generator still owes are made first, or dropped.
  void (*generator_touched)(void* generator, bool reads);
  // Which side of a collective this rank is on is decided by the plugin, in
  // one place (collective_side.h), from the call itself: its root against
  // the group's own rank, never from a convention (a data-parallel group's
  // source may be any rank). A skipped storage about
  // to be sent is first given the values it would have had without fsdpskip
  // (its skipped calls replayed); where that cannot be done the process
  // stops before the collective runs, after its summary and report (exit
  // status 3), so that no skipped value ever leaves its rank.
  //
  // Before ProcessGroup{Gloo,NCCL}::broadcast(tensors, options): `backend`
  // is the process group's backend (the call's this), `tensor_vector` a
  // std::vector<at::Tensor>*, `options` a c10d::BroadcastOptions*. A
  // receiving rank's tensors are resolved and the loading phase ends; the
  // root's are replayed.
  void (*broadcast_started)(const void* backend, void* tensor_vector, const void* options);
  // Before c10d::broadcast_coalesced (DDP's and FSDP1's sync: the tensors
  // are flattened into buckets before they reach broadcast): `group` a
  // const c10::intrusive_ptr<c10d::ProcessGroup>*, `tensors` `count`
  // at::Tensors, `root` the source's rank in the group. The root replays.
  void (*coalesced_broadcast_started)(const void* group, const void* tensors, size_t count, int root);
  // Before ProcessGroupGloo::send (`tensor_vector`) and, at its root,
  // ::scatter (`tensor_vector` a std::vector<std::vector<at::Tensor>>*, the
  // inputs): these tensors leave this rank. `collective` names the call.
  void (*sending)(const void* backend, const void* tensor_vector, bool nested, const char* collective);
  // Before ProcessGroupGloo::recv and ::recvAnysource (`tensor_vector`, a
  // std::vector<at::Tensor>*): another rank's data will write these
  // tensors. A skipped storage written whole is resolved, one written in
  // part materialized first, and the loading phase ends.
  void (*receiving)(const void* tensor_vector);
  // Before NCCL's C API moves data (ncclBcast, ncclBroadcast, ncclSend,
  // ncclRecv): the call as the preload saw it, this rank's place included.
  // The plugin decides which side this rank is on, as it does for c10d.
  void (*nccl_transfer)(const fsdpskip_nccl_call* call);
  // Before one of training's collectives (ProcessGroupGloo's all-reduce and
  // reduce-scatter, with the tensors they write, a std::vector<at::Tensor>*;
  // NCCL's ncclAllReduce and ncclReduceScatter, tensor_vector NULL and the
  // bytes received): the first one larger than a barrier's few elements
  // ends the loading phase.
  void (*collective_started)(const void* tensor_vector, size_t bytes);
  // The decision in the host changed (called by the preload, under its lock,
  // on any thread; never while the plugin is being loaded). opens_loading: a
  // new loading phase begins (the process turned active, or a variable that
  // states a loading was set again).
  void (*policy_changed)(bool opens_loading);
  // Once, at exit (atexit, before the libraries' destructors), after the
  // interposers stopped routing here: the summary, the pending list, the report.
  void (*finish)(void);
  // Something fsdpskip does not follow is about to touch [address, address
  // + bytes): a fault on a page the plugin guards (`fault`: the preload's
  // SIGSEGV handler, bytes 1), or a system call about to read or write the
  // range (`access` names it). Every skipped storage it overlaps is given
  // its values first (or the process stops, saying why). Returns whether
  // the address lies in the plugin's own memory: a fault there is retried,
  // any other goes to the program's handler. May run in a signal handler,
  // on the thread whose access faulted.
  bool (*touched)(const void* address, size_t bytes, bool fault, const char* access);
  // How many of the plugin's pages are guarded now (0: a system call needs
  // no look at its buffers).
  size_t (*guarded_count)(void);
} fsdpskip_plugin;

#define FSDPSKIP_PLUGIN_ENTRY "fsdpskip_plugin_load"
// Called once, with the host (never NULL). Returns NULL, after saying why
// through host->say, when it cannot serve this process.
typedef const fsdpskip_plugin* (*fsdpskip_plugin_load_fn)(const fsdpskip_host* host);

#ifdef __cplusplus
}
#endif
#endif
