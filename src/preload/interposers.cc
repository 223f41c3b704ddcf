// The interposers: one exported definition per row of hooks.def, under the
// row's mangled name, generated from one forwarder per shape so a row's
// symbol and its original can never drift apart.
//
// This file is built without exceptions but with asynchronous unwind tables:
// an exception thrown by an original (torch's own argument checks) unwinds
// through these frames unchanged, and they hold nothing that needs cleanup.
#include <stddef.h>
#include <time.h>

#include "hooks.h"
#include "preload.h"

namespace fsdpskip {
namespace {

uint64_t now_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + t.tv_nsec;
}

// `run(tensor)` calls the original with `tensor` in place of `self`. A skip
// still runs the original, on a zero-element tensor of self's dtype and
// device, so a call torch would reject raises exactly what it would raise.
template <typename Run>
inline auto dispatch(fsdpskip_verdict verdict, const fsdpskip_plugin* plugin, fsdpskip_kernel kernel,
                     void* self, void* probe_source, Run run) {
  switch (verdict) {
    case FSDPSKIP_SKIP: {
      run(plugin->probe_like(probe_source, 0));
      plugin->skipped(kernel, self);
      return decltype(run(self))(self);
    }
    case FSDPSKIP_AUDIT: {
      uint64_t start = now_ns();
      auto result = run(self);
      plugin->audited(kernel, self, now_ns() - start);
      return result;
    }
    default:
      return run(self);
  }
}

template <typename Fn>
inline Fn original_as(HookId id) {
  return reinterpret_cast<Fn>(original(id));
}

}  // namespace

#define EXPORT extern "C" __attribute__((visibility("default")))

// Each hot forwarder is two functions: the exported one, whose inactive path
// is a flag test and a tail call into the original (no frame to set up), and
// active_<id>, out of line, with everything an active process does.
#define ACTIVE_PATH(id) static __attribute__((noinline)) auto active_##id

// normal_ / uniform_ (Tensor& self, double, double, optional<Generator>)
#define FORWARDER_Random(id, kernel, mangled)                                                \
  using Fn_##id = void* (*)(void*, double, double, void*);                                  \
  ACTIVE_PATH(id)(void* self, double a, double b, void* generator) -> void* {               \
    auto fn = original_as<Fn_##id>(HookId::id);                                              \
    const fsdpskip_plugin* plugin = active_plugin();                                         \
    if (plugin == nullptr) return fn(self, a, b, generator);                                 \
    return dispatch(plugin->decide_init(kernel, self), plugin, kernel, self, self,          \
                    [&](void* t) { return fn(t, a, b, generator); });                        \
  }                                                                                          \
  EXPORT void* hook_##id(void* self, double a, double b, void* generator) __asm__(mangled); \
  void* hook_##id(void* self, double a, double b, void* generator) {                        \
    if (__builtin_expect(g_active, 0)) return active_##id(self, a, b, generator);            \
    return original_as<Fn_##id>(HookId::id)(self, a, b, generator);                          \
  }

// zero_ (Tensor& self)
#define FORWARDER_Unary(id, kernel, mangled)                                                      \
  using Fn_##id = void* (*)(void*);                                                              \
  ACTIVE_PATH(id)(void* self) -> void* {                                                         \
    auto fn = original_as<Fn_##id>(HookId::id);                                                   \
    const fsdpskip_plugin* plugin = active_plugin();                                              \
    if (plugin == nullptr) return fn(self);                                                       \
    return dispatch(plugin->decide_init(kernel, self), plugin, kernel, self, self, fn);          \
  }                                                                                               \
  EXPORT void* hook_##id(void* self) __asm__(mangled);                                           \
  void* hook_##id(void* self) {                                                                  \
    if (__builtin_expect(g_active, 0)) return active_##id(self);                                  \
    return original_as<Fn_##id>(HookId::id)(self);                                                \
  }

// fill_ (Tensor& self, const Tensor& value), and fill_ (Tensor& self, const
// Scalar& value), whose value the plugin reads (a fill with zero is a zero_).
#define BINARY_FORWARDER(id, kernel, mangled, decision)                                     \
  using Fn_##id = void* (*)(void*, const void*);                                           \
  ACTIVE_PATH(id)(void* self, const void* value) -> void* {                                \
    auto fn = original_as<Fn_##id>(HookId::id);                                             \
    const fsdpskip_plugin* plugin = active_plugin();                                        \
    if (plugin == nullptr) return fn(self, value);                                          \
    return dispatch(decision, plugin, kernel, self, self, [&](void* t) { return fn(t, value); }); \
  }                                                                                         \
  EXPORT void* hook_##id(void* self, const void* value) __asm__(mangled);                  \
  void* hook_##id(void* self, const void* value) {                                         \
    if (__builtin_expect(g_active, 0)) return active_##id(self, value);                     \
    return original_as<Fn_##id>(HookId::id)(self, value);                                   \
  }
#define FORWARDER_Binary(id, kernel, mangled) \
  BINARY_FORWARDER(id, kernel, mangled, plugin->decide_init(kernel, self))
#define FORWARDER_FillScalar(id, kernel, mangled) \
  BINARY_FORWARDER(id, kernel, mangled, plugin->decide_fill(self, value))

// copy_ (Tensor& self, const Tensor& src, bool non_blocking). A skipped copy
// checks its arguments on two probes: one like self, one like src.
#define FORWARDER_Copy(id, kernel, mangled)                                                      \
  using Fn_##id = void* (*)(void*, const void*, bool);                                          \
  EXPORT void* hook_##id(void* self, const void* src, bool non_blocking) __asm__(mangled);      \
  ACTIVE_PATH(id)(void* self, const void* src, bool non_blocking) -> void*;                     \
  void* hook_##id(void* self, const void* src, bool non_blocking) {                             \
    if (__builtin_expect(g_active, 0)) return active_##id(self, src, non_blocking);             \
    return original_as<Fn_##id>(HookId::id)(self, src, non_blocking);                           \
  }                                                                                             \
  ACTIVE_PATH(id)(void* self, const void* src, bool non_blocking) -> void* {                    \
    auto fn = original_as<Fn_##id>(HookId::id);                                                  \
    const fsdpskip_plugin* plugin = active_plugin();                                             \
    if (plugin == nullptr) return fn(self, src, non_blocking);                                   \
    fsdpskip_verdict verdict = plugin->decide_copy(self, src);                                   \
    void* result = dispatch(verdict, plugin, kernel, self, self, [&](void* t) {                  \
      return fn(t, t == self ? src : plugin->probe_like(src, 1), non_blocking);                  \
    });                                                                                          \
    if (verdict == FSDPSKIP_RUN_NOTIFY) plugin->copied(self, src);                               \
    return result;                                                                               \
  }

// c10::TensorImpl::set_requires_grad(this, bool): tag after the original
// succeeded (it throws for non-leaf tensors; then nothing is tagged).
#define FORWARDER_RequiresGrad(id, kernel, mangled)                     \
  EXPORT void hook_##id(void* impl, bool requires_grad) __asm__(mangled); \
  void hook_##id(void* impl, bool requires_grad) {                       \
    original_as<void (*)(void*, bool)>(HookId::id)(impl, requires_grad); \
    if (!requires_grad) return;                                          \
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->requires_grad_set(impl); \
  }

// at::TensorBase::set_data(this, const TensorBase& new_data)
#define FORWARDER_SetData(id, kernel, mangled)                                   \
  EXPORT void hook_##id(void* self, const void* new_data) __asm__(mangled);     \
  void hook_##id(void* self, const void* new_data) {                            \
    original_as<void (*)(void*, const void*)>(HookId::id)(self, new_data);       \
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->data_set(self); \
  }

// ProcessGroup*::broadcast(this, vector<Tensor>&, const BroadcastOptions&)
// returns intrusive_ptr<Work> by value: hidden result pointer first.
#define FORWARDER_Broadcast(id, kernel, mangled)                                           \
  EXPORT void* hook_##id(void* result, void* group, void* tensors, void* options)         \
      __asm__(mangled);                                                                    \
  void* hook_##id(void* result, void* group, void* tensors, void* options) {              \
    auto fn = original_as<void* (*)(void*, void*, void*, void*)>(HookId::id);              \
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->broadcast_started(tensors); \
    return fn(result, group, tensors, options);                                            \
  }

// structured_*::impl(this, self, [inputs...,] out): the meta function already
// checked the arguments, so a skipped impl needs no probe.
#define CHAIN_BODY(id, kernel, out, ...)                                               \
  auto fn = original_as<void (*)(void*, __VA_ARGS__)>(HookId::id);                      \
  const fsdpskip_plugin* plugin = active_plugin();                                      \
  fsdpskip_verdict verdict = plugin ? plugin->decide_chain(self, out) : FSDPSKIP_RUN;   \
  if (verdict == FSDPSKIP_SKIP) return plugin->skipped(kernel, const_cast<void*>(out)); \
  uint64_t start = verdict == FSDPSKIP_AUDIT ? now_ns() : 0;

#define FORWARDER_Chain1(id, kernel, mangled)                                                   \
  EXPORT void hook_##id(void* op, const void* self, const void* out) __asm__(mangled);         \
  void hook_##id(void* op, const void* self, const void* out) {                                \
    CHAIN_BODY(id, kernel, out, const void*, const void*)                                       \
    fn(op, self, out);                                                                          \
    if (start) plugin->audited(kernel, const_cast<void*>(out), now_ns() - start);               \
  }
#define FORWARDER_Chain2(id, kernel, mangled)                                                   \
  EXPORT void hook_##id(void* op, const void* self, const void* x, const void* out)            \
      __asm__(mangled);                                                                         \
  void hook_##id(void* op, const void* self, const void* x, const void* out) {                 \
    CHAIN_BODY(id, kernel, out, const void*, const void*, const void*)                          \
    fn(op, self, x, out);                                                                       \
    if (start) plugin->audited(kernel, const_cast<void*>(out), now_ns() - start);               \
  }
#define FORWARDER_Chain3(id, kernel, mangled)                                                   \
  EXPORT void hook_##id(void* op, const void* self, const void* x, const void* y,              \
                        const void* out) __asm__(mangled);                                      \
  void hook_##id(void* op, const void* self, const void* x, const void* y, const void* out) {  \
    CHAIN_BODY(id, kernel, out, const void*, const void*, const void*, const void*)             \
    fn(op, self, x, y, out);                                                                    \
    if (start) plugin->audited(kernel, const_cast<void*>(out), now_ns() - start);               \
  }

// NCCL's C API returns ncclResult_t; ncclSystemError answers a call whose
// original is not loaded (a program that found the preload's definition with
// dlsym before it loaded NCCL).
constexpr int kNcclSystemError = 2;

// Bytes of `count` elements of an ncclDataType_t; 0 for one this table does
// not know (nothing is then resolved).
inline size_t nccl_bytes(size_t count, int datatype) {
  //                                   int8 uint8 int32 uint32 int64 uint64 f16 f32 f64 bf16 f8e4m3 f8e5m2
  static const unsigned char kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return datatype >= 0 && datatype < static_cast<int>(sizeof kSizes) ? count * kSizes[datatype] : 0;
}

template <typename Fn, typename... Args>
inline int forward_nccl(HookId id, void* recvbuff, size_t count, int datatype, Args... args) {
  auto fn = reinterpret_cast<Fn>(find_original(id));
  if (fn == nullptr) return kNcclSystemError;
  if (const fsdpskip_plugin* plugin = active_plugin()) plugin->received(recvbuff, nccl_bytes(count, datatype));
  return fn(args...);
}

// ncclBcast(buff, count, datatype, root, comm, stream)
#define FORWARDER_NcclBcast(id, kernel, mangled)                                                       \
  EXPORT int hook_##id(void* buff, size_t count, int datatype, int root, void* comm, void* stream)    \
      __asm__(mangled);                                                                               \
  int hook_##id(void* buff, size_t count, int datatype, int root, void* comm, void* stream) {        \
    return forward_nccl<int (*)(void*, size_t, int, int, void*, void*)>(HookId::id, buff, count, datatype, \
                                                                         buff, count, datatype, root, comm, stream); \
  }
// ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)
#define FORWARDER_NcclBroadcast(id, kernel, mangled)                                                   \
  EXPORT int hook_##id(const void* send, void* recv, size_t count, int datatype, int root, void* comm, \
                       void* stream) __asm__(mangled);                                                \
  int hook_##id(const void* send, void* recv, size_t count, int datatype, int root, void* comm, void* stream) { \
    return forward_nccl<int (*)(const void*, void*, size_t, int, int, void*, void*)>(                 \
        HookId::id, recv, count, datatype, send, recv, count, datatype, root, comm, stream);          \
  }
// ncclRecv(recvbuff, count, datatype, peer, comm, stream)
#define FORWARDER_NcclRecv(id, kernel, mangled) FORWARDER_NcclBcast(id, kernel, mangled)

#define HOOK(id, library, shape, kernel, mangled) FORWARDER_##shape(id, kernel, mangled)
#include "hooks.def"
#undef HOOK

}  // namespace fsdpskip
