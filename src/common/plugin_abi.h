// The C interface between libfsdpskip.so (no torch, no libstdc++) and
// libfsdpskip_torch.so (built against one libtorch). Only raw pointers cross
// it: at::Tensor* and c10::TensorImpl* owned by torch, never copied or kept.
#ifndef FSDPSKIP_PLUGIN_ABI_H
#define FSDPSKIP_PLUGIN_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bump on any change to the structs below; both sides check it.
#define FSDPSKIP_PLUGIN_ABI 3

// The plugin records the libtorch it was built against in an ELF section of
// this name, so the preload can compare it with the loaded libtorch *before*
// dlopen: loading a plugin linked to another libtorch would map a second copy.
#define FSDPSKIP_TORCH_ID_SECTION ".fsdpskip_torch_id"

// Kernels the plugin knows about; the preload's hook table maps symbols here.
typedef enum fsdpskip_kernel {
  FSDPSKIP_NORMAL,
  FSDPSKIP_UNIFORM,
  FSDPSKIP_ZERO,
  FSDPSKIP_FILL,
  FSDPSKIP_COPY,
  FSDPSKIP_CHAIN,  // later steps of an init chain (erfinv_, mul_, add_, clamp_)
  FSDPSKIP_KERNEL_COUNT
} fsdpskip_kernel;

typedef enum fsdpskip_mode { FSDPSKIP_MODE_ON = 1, FSDPSKIP_MODE_AUDIT = 2 } fsdpskip_mode;

typedef enum fsdpskip_log_level {
  FSDPSKIP_LOG_QUIET,
  FSDPSKIP_LOG_SUMMARY,
  FSDPSKIP_LOG_DEBUG,
  FSDPSKIP_LOG_TRACE
} fsdpskip_log_level;

// What to do with one kernel call.
typedef enum fsdpskip_verdict {
  FSDPSKIP_RUN,    // run the original kernel
  FSDPSKIP_SKIP,   // run it on probes only (for its argument checks), then skipped()
  FSDPSKIP_AUDIT,  // would skip: run it, time it, report audited()
  FSDPSKIP_RUN_NOTIFY,  // copy_: run it, then report copied() (it may resolve a storage)
} fsdpskip_verdict;

// The preload's current decision. The preload owns it and rewrites it, under
// its own lock, whenever the program changes a policy variable (setenv,
// os.environ); then it calls the plugin's policy_changed().
typedef struct fsdpskip_host {
  uint32_t abi;
  bool active;  // false: no new tags or skips; skipped storages still resolve
  fsdpskip_mode mode;
  fsdpskip_log_level log_level;
  int local_rank;
  int rank;                      // -1 when unknown
  const char* report_template;   // FSDPSKIP_REPORT or NULL
} fsdpskip_host;

typedef struct fsdpskip_plugin {
  uint32_t abi;
  // Init kernels (normal_, uniform_, zero_, fill_) on `self` (an at::Tensor*).
  fsdpskip_verdict (*decide_init)(fsdpskip_kernel kernel, void* self);
  // fill_(self, value) with a c10::Scalar*: decide_init, where a fill with
  // zero (all bits zero) is a zero_.
  fsdpskip_verdict (*decide_fill)(void* self, const void* scalar);
  // copy_(dst, src): SKIP when src is a skipped storage during loading;
  // RUN_NOTIFY when the copy may resolve dst.
  fsdpskip_verdict (*decide_copy)(void* dst, const void* src);
  // An init chain's later step writing `out` from `self` (structured impl).
  fsdpskip_verdict (*decide_chain)(const void* self, const void* out);
  // A zero-element tensor with self's dtype and device, owned by the plugin
  // (one per slot and thread), on which the original checks its arguments.
  void* (*probe_like)(const void* self, int slot);
  void (*skipped)(fsdpskip_kernel kernel, void* self);
  void (*audited)(fsdpskip_kernel kernel, void* self, uint64_t nanoseconds);
  void (*copied)(void* dst, const void* src);
  void (*requires_grad_set)(void* tensor_impl);
  void (*data_set)(void* self);
  void (*broadcast_started)(void* tensor_vector);
  // An NCCL receive (ncclBcast, ncclBroadcast, ncclRecv) will write
  // [buffer, buffer + bytes) with a peer's data, rank 0's while loading:
  // resolves the skipped storages inside it and ends the loading phase.
  // bytes is 0 for a datatype the preload does not know.
  void (*received)(const void* buffer, size_t bytes);
  // The decision in the host changed (called by the preload, under its lock,
  // on any thread). opens_loading: a new loading phase begins (the process
  // turned active, or a variable that states a loading was set again).
  void (*policy_changed)(bool opens_loading);
  // At exit: summary line, pending list, JSON report.
  void (*finish)(void);
} fsdpskip_plugin;

#define FSDPSKIP_PLUGIN_ENTRY "fsdpskip_plugin_load"
// Returns NULL (after printing one line) when it cannot serve this process.
typedef const fsdpskip_plugin* (*fsdpskip_plugin_load_fn)(const fsdpskip_host* host);

#ifdef __cplusplus
}
#endif
#endif
