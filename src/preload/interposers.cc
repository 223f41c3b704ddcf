// The interposers: one exported definition per row of hooks.def, under the
// row's mangled name, each a single call into its shape's forwarder (a
// template over the row's id and kernel), so a row's symbol and its
// original can never drift apart and a debugger steps straight into the
// forwarder.
//
// The kernel forwarders' inactive path is a test of g_routed and a jump to
// the original through g_originals (never null: hooks.h): on x86-64, three
// instructions. What an active process does is out of line (`active`). The
// notifying ones (set_requires_grad, broadcasts, comparisons) test the flag
// after or around the original's call; a chain step may skip it.
//
// This file is built without exceptions but with asynchronous unwind tables:
// an exception thrown by an original (torch's own argument checks) unwinds
// through these frames unchanged, and they hold nothing that needs cleanup.
#include <stddef.h>
#include <time.h>

#include "hooks.h"
#include "loaded_objects.h"
#include "preload.h"

namespace fsdpskip {
namespace {

#define NOINLINE __attribute__((noinline))

uint64_t now_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + t.tv_nsec;
}

template <typename Fn>
inline Fn original_as(HookId id) {
  return reinterpret_cast<Fn>(original(id));
}

// Carries out a verdict on a kernel call on `self`. `run(tensor)` calls the
// original with `tensor` in place of self. SKIP and ZERO_LAZILY still run
// the original, on a zero-element stand-in of self's dtype and device, so a
// call torch would reject raises exactly what it would raise. Where the
// plugin could not do its part (no stand-in, or skipped() or zero_lazily()
// failed), the original runs on self: the call as without fsdpskip.
// normal_ and uniform_ pass `generator`, the variable their `run` reads the
// generator argument from: the stand-in run is given the plugin's copy of
// it (the original may move from the argument it gets), so that skipped()
// and a run on self still see the caller's. `arguments` go to skipped(),
// for the call's replay.
template <typename Run>
inline void* carry_out(fsdpskip_verdict verdict, const fsdpskip_plugin* plugin, fsdpskip_kernel kernel, void* self,
                       const fsdpskip_call_arguments& arguments, Run run, void** generator = nullptr) {
  switch (verdict) {
    case FSDPSKIP_SKIP:
    case FSDPSKIP_ZERO_LAZILY: {
      void* stand_in = plugin->stand_in_like(self, 0);
      void* callers = generator ? *generator : nullptr;
      void* copy = callers ? plugin->stand_in_generator(callers) : nullptr;
      if (stand_in == nullptr || (callers && copy == nullptr)) return run(self);
      if (callers) *generator = copy;
      run(stand_in);
      if (callers) *generator = callers;
      bool done = verdict == FSDPSKIP_SKIP ? plugin->skipped(kernel, self, callers, &arguments)
                                                 : plugin->zero_lazily(self);
      return done ? self : run(self);
    }
    case FSDPSKIP_AUDIT: {
      uint64_t start = now_ns();
      void* result = run(self);
      plugin->audited(kernel, self, now_ns() - start);
      return result;
    }
    default:
      return run(self);
  }
}

// normal_ / uniform_ (Tensor& self, double, double, optional<Generator>*)
template <HookId id, fsdpskip_kernel kernel>
struct Random {
  using Fn = void* (*)(void*, double, double, void*);
  static NOINLINE void* active(void* self, double a, double b, void* generator) {
    Fn fn = original_as<Fn>(id);
    const fsdpskip_plugin* plugin = active_plugin();
    if (plugin == nullptr) return fn(self, a, b, generator);
    return carry_out(plugin->decide_init(kernel, self, generator), plugin, kernel, self, {a, b, nullptr, false, {}},
                     [&](void* t) { return fn(t, a, b, generator); }, &generator);
  }
  static void* forward(void* self, double a, double b, void* generator) {
    if (__builtin_expect(routed(), 0)) return active(self, a, b, generator);
    return original_as<Fn>(id)(self, a, b, generator);
  }
};

// zero_ (Tensor& self)
template <HookId id, fsdpskip_kernel kernel>
struct Unary {
  using Fn = void* (*)(void*);
  static NOINLINE void* active(void* self) {
    Fn fn = original_as<Fn>(id);
    const fsdpskip_plugin* plugin = active_plugin();
    if (plugin == nullptr) return fn(self);
    return carry_out(plugin->decide_init(kernel, self, nullptr), plugin, kernel, self, {0, 0, nullptr, false, {}}, fn);
  }
  static void* forward(void* self) {
    if (__builtin_expect(routed(), 0)) return active(self);
    return original_as<Fn>(id)(self);
  }
};

// fill_ (Tensor& self, const Tensor& value) and fill_ (Tensor& self, const
// Scalar& value); the plugin reads the scalar (a fill with +0 is a zero_).
template <HookId id, fsdpskip_kernel kernel, bool kScalar>
struct Fill {
  using Fn = void* (*)(void*, const void*);
  static NOINLINE void* active(void* self, const void* value) {
    Fn fn = original_as<Fn>(id);
    const fsdpskip_plugin* plugin = active_plugin();
    if (plugin == nullptr) return fn(self, value);
    fsdpskip_verdict verdict = kScalar ? plugin->decide_fill(self, value) : plugin->decide_init(kernel, self, nullptr);
    return carry_out(verdict, plugin, kernel, self, {0, 0, value, kScalar, {}}, [&](void* t) { return fn(t, value); });
  }
  static void* forward(void* self, const void* value) {
    if (__builtin_expect(routed(), 0)) return active(self, value);
    return original_as<Fn>(id)(self, value);
  }
};
template <HookId id, fsdpskip_kernel kernel>
using FillTensor = Fill<id, kernel, false>;
template <HookId id, fsdpskip_kernel kernel>
using FillScalar = Fill<id, kernel, true>;

// copy_ (Tensor& self, const Tensor& src, bool non_blocking). A skipped copy
// checks its arguments on two stand-ins: one like self, one like src.
template <HookId id, fsdpskip_kernel kernel>
struct Copy {
  using Fn = void* (*)(void*, const void*, bool);
  static NOINLINE void* active(void* self, const void* src, bool non_blocking) {
    Fn fn = original_as<Fn>(id);
    const fsdpskip_plugin* plugin = active_plugin();
    if (plugin == nullptr) return fn(self, src, non_blocking);
    fsdpskip_verdict verdict = plugin->decide_copy(self, src);
    if (verdict == FSDPSKIP_SKIP) {
      void* self_stand_in = plugin->stand_in_like(self, 0);
      const void* src_stand_in = self_stand_in ? plugin->stand_in_like(src, 1) : nullptr;
      if (src_stand_in == nullptr) return fn(self, src, non_blocking);
      fn(self_stand_in, src_stand_in, non_blocking);
      fsdpskip_call_arguments arguments = {0, 0, src, false, {}};
      return plugin->skipped(kernel, self, nullptr, &arguments) ? self : fn(self, src, non_blocking);
    }
    void* result = carry_out(verdict, plugin, kernel, self, {0, 0, src, false, {}},
                             [&](void* t) { return fn(t, src, non_blocking); });
    if (verdict == FSDPSKIP_RUN_NOTIFY) plugin->copied(self, src);
    return result;
  }
  static void* forward(void* self, const void* src, bool non_blocking) {
    if (__builtin_expect(routed(), 0)) return active(self, src, non_blocking);
    return original_as<Fn>(id)(self, src, non_blocking);
  }
};

// c10::TensorImpl::set_requires_grad(this, bool): tag after the original
// succeeded (it throws for non-leaf tensors; then nothing is tagged).
template <HookId id, fsdpskip_kernel>
struct RequiresGrad {
  using Fn = void (*)(void*, bool);
  static void forward(void* impl, bool requires_grad) {
    if (__builtin_expect(routed(), 0)) return active(impl, requires_grad);
    return original_as<Fn>(id)(impl, requires_grad);
  }
  static NOINLINE void active(void* impl, bool requires_grad) {
    original_as<Fn>(id)(impl, requires_grad);
    if (!requires_grad) return;
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->requires_grad_set(impl);
  }
};

// at::TensorBase::set_data(this, const TensorBase& new_data)
template <HookId id, fsdpskip_kernel>
struct SetData {
  using Fn = void (*)(void*, const void*);
  static void forward(void* self, const void* new_data) {
    if (__builtin_expect(routed(), 0)) return active(self, new_data);
    return original_as<Fn>(id)(self, new_data);
  }
  static NOINLINE void active(void* self, const void* new_data) {
    original_as<Fn>(id)(self, new_data);
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->data_set(self);
  }
};

// ProcessGroup*::broadcast(this, vector<Tensor>&, const BroadcastOptions&)
// returns c10::intrusive_ptr<Work> by value: a one-pointer class that is not
// trivially copyable, so the caller provides the memory it is returned in,
// as a hidden first argument on x86-64 (System V) and in x8 on AArch64
// (AAPCS64). The forwarder's result is declared as such a class, and the
// compiler applies each platform's rule itself; C++17's guaranteed elision
// hands the caller's memory straight on to the original, so the result is
// never copied or destroyed here (its members are declared only: a use
// would fail to link).
#if !defined(__x86_64__) && !defined(__aarch64__)
#error "the forwarders' shapes are checked on x86-64 and AArch64 only (tests/unit/test_forwarder_shapes.cc)"
#endif
struct ReturnedInMemory {
  ReturnedInMemory(const ReturnedInMemory&);
  ~ReturnedInMemory();
  void* pointer;
};

template <HookId id, fsdpskip_kernel>
struct Broadcast {
  using Fn = ReturnedInMemory (*)(void*, void*, void*);
  static ReturnedInMemory forward(void* group, void* tensors, void* options) {
    Fn fn = original_as<Fn>(id);
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->broadcast_started(group, tensors, options);
    return fn(group, tensors, options);
  }
};

// at::CPUGeneratorImpl's state read (get_state(this) const, which returns
// an intrusive_ptr<TensorImpl> in memory) or replaced (set_current_seed(this,
// uint64_t), seed(this), set_state(this, const TensorImpl&)): told to the
// plugin first, then run.
template <HookId id, bool kReads, typename Result, typename... Arguments>
struct GeneratorCall {
  static Result forward(void* generator, Arguments... arguments) {
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->generator_touched(generator, kReads);
    return original_as<Result (*)(void*, Arguments...)>(id)(generator, arguments...);
  }
};
template <HookId id, fsdpskip_kernel>
using GeneratorRead = GeneratorCall<id, true, ReturnedInMemory>;
template <HookId id, fsdpskip_kernel>
using GeneratorSeeded = GeneratorCall<id, false, void, uint64_t>;
template <HookId id, fsdpskip_kernel>
using GeneratorReseeded = GeneratorCall<id, false, uint64_t>;
template <HookId id, fsdpskip_kernel>
using GeneratorStateSet = GeneratorCall<id, false, void, const void*>;
// at::CPUGeneratorImpl::random(this) and random64(this): every draw of every
// kernel, so its path is a load of this library's own word and the
// original's call. The plugin is told only of a draw from a generator that
// owes (the draw holds the generator's mutex, under which its debt was
// published): the word names it when it owes alone, and says ANY when
// several do, which the slots then tell apart.
inline bool owes(const void* generator) {
  void* summary = __atomic_load_n(&g_owing_generators[FSDPSKIP_OWING_SLOTS], __ATOMIC_ACQUIRE);
  if (__builtin_expect(summary == nullptr, 1)) return false;
  if (summary != FSDPSKIP_OWING_ANY) return summary == generator;
  bool found = false;
  for (int i = 0; i < FSDPSKIP_OWING_SLOTS; ++i) {
    void* slot = __atomic_load_n(&g_owing_generators[i], __ATOMIC_ACQUIRE);
    found |= slot == generator || slot == FSDPSKIP_OWING_ANY;
  }
  return found;
}
template <HookId id, typename Result>
struct GeneratorDrawCall {
  static Result forward(void* generator) {
    if (__builtin_expect(owes(generator), 0))
      if (const fsdpskip_plugin* plugin = active_plugin()) plugin->generator_touched(generator, true);
    return original_as<Result (*)(void*)>(id)(generator);
  }
};
template <HookId id, fsdpskip_kernel>
using GeneratorDraw = GeneratorDrawCall<id, uint32_t>;
template <HookId id, fsdpskip_kernel>
using GeneratorDraw64 = GeneratorDrawCall<id, uint64_t>;

// c10d::broadcast_coalesced(intrusive_ptr<ProcessGroup> (by value or const&:
// either way its address), ArrayRef<Tensor> tensors, size_t buffer_size, int
// root). The ArrayRef, a trivially copyable pair of words, travels as its two
// words in two registers on x86-64 and AArch64 alike.
template <HookId id, fsdpskip_kernel>
struct Coalesced {
  using Fn = void (*)(void*, const void*, size_t, size_t, int);
  static void forward(void* group, const void* tensors, size_t count, size_t buffer_size, int root) {
    Fn fn = original_as<Fn>(id);
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->coalesced_broadcast_started(group, tensors, count, root);
    return fn(group, tensors, count, buffer_size, root);
  }
};

// ProcessGroupGloo::recv(this, vector<Tensor>&, int srcRank, int tag) and
// ::recvAnysource(this, vector<Tensor>&, int tag).
template <HookId id, typename... Arguments>
struct Receive {
  static ReturnedInMemory forward(void* group, void* tensors, Arguments... arguments) {
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->receiving(tensors);
    return original_as<ReturnedInMemory (*)(void*, void*, Arguments...)>(id)(group, tensors, arguments...);
  }
};
template <HookId id, fsdpskip_kernel>
using Recv = Receive<id, int, int>;
template <HookId id, fsdpskip_kernel>
using RecvAnysource = Receive<id, int>;

// ProcessGroupGloo::send(this, vector<Tensor>&, int dstRank, int tag)
template <HookId id, fsdpskip_kernel>
struct Send {
  using Fn = ReturnedInMemory (*)(void*, void*, int, int);
  static ReturnedInMemory forward(void* group, void* tensors, int peer, int tag) {
    Fn fn = original_as<Fn>(id);
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->sending(group, tensors, false, "send");
    return fn(group, tensors, peer, tag);
  }
};

// ProcessGroupGloo::scatter(this, vector<Tensor>& outputs,
// vector<vector<Tensor>>& inputs, const ScatterOptions&): only the root's
// inputs hold tensors.
template <HookId id, fsdpskip_kernel>
struct Scatter {
  using Fn = ReturnedInMemory (*)(void*, void*, void*, void*);
  static ReturnedInMemory forward(void* group, void* outputs, void* inputs, void* options) {
    Fn fn = original_as<Fn>(id);
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->sending(group, inputs, true, "scatter");
    return fn(group, outputs, inputs, options);
  }
};

// ProcessGroupGloo::allreduce(this, vector<Tensor>&, const AllreduceOptions&)
// and ::reduce_scatter(this, vector<Tensor>& outputs, vector<vector<Tensor>>&
// inputs, const ReduceScatterOptions&): training's collectives, told to the
// plugin with the tensors they write (their size tells a barrier from a
// gradient), then run.
template <HookId id, fsdpskip_kernel>
struct Collective {
  using Fn = ReturnedInMemory (*)(void*, void*, void*);
  static ReturnedInMemory forward(void* group, void* tensors, void* options) {
    Fn fn = original_as<Fn>(id);
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->collective_started(tensors, 0);
    return fn(group, tensors, options);
  }
};

template <HookId id, fsdpskip_kernel>
struct ReduceScatter {
  using Fn = ReturnedInMemory (*)(void*, void*, void*, void*);
  static ReturnedInMemory forward(void* group, void* outputs, void* inputs, void* options) {
    Fn fn = original_as<Fn>(id);
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->collective_started(outputs, 0);
    return fn(group, outputs, inputs, options);
  }
};

// A structured kernel's impl(this, self, [operands...,] out): its meta
// function already checked the arguments, so nothing here needs a stand-in.
// A chain step (role STEP: erfinv_, mul_, add_, clamp_) is decided by the
// plugin, and a skipped one runs nothing. The others (role READ: a
// comparison with a scalar, `|` or any()) have their skipped inputs
// materialized first.
template <HookId id, fsdpskip_kernel kernel>
struct Structured {
  template <typename... Tensors>
  using Fn = void (*)(void*, const void*, Tensors...);
  template <typename... Tensors>
  static void forward(void* op, const void* self, Tensors... operands_then_out) {
    if (__builtin_expect(routed(), 0)) return active(op, self, operands_then_out...);
    return original_as<Fn<Tensors...>>(id)(op, self, operands_then_out...);
  }
  template <typename... Tensors>
  static NOINLINE void active(void* op, const void* self, Tensors... operands_then_out) {
    Fn<Tensors...> fn = original_as<Fn<Tensors...>>(id);
    const fsdpskip_plugin* plugin = active_plugin();
    if (plugin == nullptr) return fn(op, self, operands_then_out...);
    constexpr size_t kOperands = sizeof...(Tensors) - 1;
    const void* arguments[] = {operands_then_out...};
    void* out = const_cast<void*>(arguments[kOperands]);
    if constexpr (fsdpskip_role_of(kernel) == FSDPSKIP_ROLE_STEP) {
      static_assert(kOperands <= 2, "fsdpskip_call_arguments holds self and two operands");
      fsdpskip_call_arguments step = {0, 0, nullptr, false, {self}};
      for (size_t i = 0; i < kOperands; ++i) step.operands[i + 1] = arguments[i];
      fsdpskip_verdict verdict = plugin->decide_chain(kernel, self, out, &step);
      if (verdict == FSDPSKIP_SKIP && plugin->skipped(kernel, out, nullptr, &step)) return;
      uint64_t start = verdict == FSDPSKIP_AUDIT ? now_ns() : 0;
      fn(op, self, operands_then_out...);
      if (start) plugin->audited(kernel, out, now_ns() - start);
    } else {
      static_assert(fsdpskip_role_of(kernel) == FSDPSKIP_ROLE_READ, "a structured row is a step or a read");
      plugin->reading(kernel, self, kOperands == 1 ? arguments[0] : nullptr);  // any() has no operand
      fn(op, self, operands_then_out...);
    }
  }
};

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

// This rank's place in an NCCL communicator (ncclCommUserRank, looked up
// once where NCCL is loaded), or -1 when it cannot be told.
int nccl_rank(void* comm) {
  using Fn = int (*)(void*, int*);
  static void* const kUnresolved = reinterpret_cast<void*>(1);
  static void* user_rank = kUnresolved;
  void* fn = __atomic_load_n(&user_rank, __ATOMIC_ACQUIRE);
  if (fn == kUnresolved) {
    fn = find_function_anywhere("ncclCommUserRank");
    __atomic_store_n(&user_rank, fn, __ATOMIC_RELEASE);
  }
  int rank = -1;
  if (fn == nullptr || reinterpret_cast<Fn>(fn)(comm, &rank) != 0) return -1;
  return rank;
}

// Tells the plugin what an NCCL call moves, a broadcast's place in its
// communicator included; the plugin decides which side this rank is on.
inline void tell_nccl_transfer(const char* name, fsdpskip_transfer transfer, const void* send, void* receive,
                               size_t bytes, int root, void* comm) {
  const fsdpskip_plugin* plugin = active_plugin();
  if (plugin == nullptr) return;
  int rank = transfer == FSDPSKIP_TRANSFER_BROADCAST ? nccl_rank(comm) : -1;  // a send's or receive's side is its own
  fsdpskip_nccl_call call = {name, transfer, send, receive, bytes, root, rank};
  plugin->nccl_transfer(&call);
}

template <HookId id, typename Fn>
inline Fn nccl_original() {
  return reinterpret_cast<Fn>(find_original(id));
}

// ncclBcast(buff, count, datatype, root, comm, stream)
template <HookId id, fsdpskip_kernel>
struct NcclBcast {
  static int forward(void* buff, size_t count, int datatype, int root, void* comm, void* stream) {
    auto fn = nccl_original<id, int (*)(void*, size_t, int, int, void*, void*)>();
    if (fn == nullptr) return kNcclSystemError;
    tell_nccl_transfer("ncclBcast", FSDPSKIP_TRANSFER_BROADCAST, buff, buff, nccl_bytes(count, datatype), root, comm);
    return fn(buff, count, datatype, root, comm, stream);
  }
};

// ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)
template <HookId id, fsdpskip_kernel>
struct NcclBroadcast {
  static int forward(const void* send, void* recv, size_t count, int datatype, int root, void* comm, void* stream) {
    auto fn = nccl_original<id, int (*)(const void*, void*, size_t, int, int, void*, void*)>();
    if (fn == nullptr) return kNcclSystemError;
    tell_nccl_transfer("ncclBroadcast", FSDPSKIP_TRANSFER_BROADCAST, send, recv, nccl_bytes(count, datatype), root,
                       comm);
    return fn(send, recv, count, datatype, root, comm, stream);
  }
};

// ncclRecv(recvbuff, count, datatype, peer, comm, stream) and ncclSend(sendbuff,
// ...), of the same layout.
template <HookId id, fsdpskip_kernel, bool kSends>
struct NcclPointToPoint {
  static int forward(void* buff, size_t count, int datatype, int peer, void* comm, void* stream) {
    auto fn = nccl_original<id, int (*)(void*, size_t, int, int, void*, void*)>();
    if (fn == nullptr) return kNcclSystemError;
    size_t bytes = nccl_bytes(count, datatype);
    if (kSends) tell_nccl_transfer("ncclSend", FSDPSKIP_TRANSFER_SEND, buff, nullptr, bytes, -1, comm);
    else tell_nccl_transfer("ncclRecv", FSDPSKIP_TRANSFER_RECEIVE, nullptr, buff, bytes, -1, comm);
    return fn(buff, count, datatype, peer, comm, stream);
  }
};
template <HookId id, fsdpskip_kernel kernel>
using NcclRecv = NcclPointToPoint<id, kernel, false>;
template <HookId id, fsdpskip_kernel kernel>
using NcclSend = NcclPointToPoint<id, kernel, true>;

// ncclAllReduce and ncclReduceScatter(sendbuff, recvbuff, count, datatype,
// op, comm, stream): training's collectives, of `count` elements received.
template <HookId id, fsdpskip_kernel>
struct NcclReduce {
  static int forward(const void* send, void* recv, size_t count, int datatype, int op, void* comm, void* stream) {
    auto fn = nccl_original<id, int (*)(const void*, void*, size_t, int, int, void*, void*)>();
    if (fn == nullptr) return kNcclSystemError;
    if (const fsdpskip_plugin* plugin = active_plugin()) plugin->collective_started(nullptr, nccl_bytes(count, datatype));
    return fn(send, recv, count, datatype, op, comm, stream);
  }
};

}  // namespace

// Each shape of hooks.def: its forwarder, and its C-level signature: result,
// parameters, the arguments that pass them on.
#define SHAPE_Random Random, void*, (void* self, double a, double b, void* generator), (self, a, b, generator)
#define SHAPE_Unary Unary, void*, (void* self), (self)
#define SHAPE_Binary FillTensor, void*, (void* self, const void* value), (self, value)
#define SHAPE_FillScalar FillScalar, void*, (void* self, const void* value), (self, value)
#define SHAPE_Copy Copy, void*, (void* self, const void* src, bool non_blocking), (self, src, non_blocking)
#define SHAPE_RequiresGrad RequiresGrad, void, (void* impl, bool requires_grad), (impl, requires_grad)
#define SHAPE_SetData SetData, void, (void* self, const void* new_data), (self, new_data)
#define SHAPE_Broadcast Broadcast, ReturnedInMemory, (void* group, void* tensors, void* options), \
                        (group, tensors, options)
#define SHAPE_Collective Collective, ReturnedInMemory, (void* group, void* tensors, void* options), \
                         (group, tensors, options)
#define SHAPE_ReduceScatter ReduceScatter, ReturnedInMemory, \
    (void* group, void* outputs, void* inputs, void* options), (group, outputs, inputs, options)
#define SHAPE_Scatter Scatter, ReturnedInMemory, \
    (void* group, void* outputs, void* inputs, void* options), (group, outputs, inputs, options)
#define SHAPE_Send Send, ReturnedInMemory, (void* group, void* tensors, int peer, int tag), (group, tensors, peer, tag)
#define SHAPE_Recv Recv, ReturnedInMemory, (void* group, void* tensors, int peer, int tag), (group, tensors, peer, tag)
#define SHAPE_RecvAnysource RecvAnysource, ReturnedInMemory, (void* group, void* tensors, int tag), (group, tensors, tag)
#define SHAPE_GeneratorRead GeneratorRead, ReturnedInMemory, (void* generator), (generator)
#define SHAPE_GeneratorSeeded GeneratorSeeded, void, (void* generator, uint64_t seed), (generator, seed)
#define SHAPE_GeneratorReseeded GeneratorReseeded, uint64_t, (void* generator), (generator)
#define SHAPE_GeneratorStateSet GeneratorStateSet, void, (void* generator, const void* state), (generator, state)
#define SHAPE_GeneratorDraw GeneratorDraw, uint32_t, (void* generator), (generator)
#define SHAPE_GeneratorDraw64 GeneratorDraw64, uint64_t, (void* generator), (generator)
#define SHAPE_Coalesced Coalesced, void, \
    (void* group, const void* tensors, size_t count, size_t buffer_size, int root), \
    (group, tensors, count, buffer_size, root)
// Structured impls by their tensor arguments after `this` (a Scalar& counts):
// self and out; one more; two more.
#define SHAPE_Structured2 Structured, void, (void* op, const void* self, const void* out), (op, self, out)
#define SHAPE_Structured3 Structured, void, (void* op, const void* self, const void* x, const void* out), \
                          (op, self, x, out)
#define SHAPE_Structured4 Structured, void, \
    (void* op, const void* self, const void* x, const void* y, const void* out), (op, self, x, y, out)
#define SHAPE_NcclBcast NcclBcast, int, (void* buff, size_t count, int datatype, int root, void* comm, void* stream), \
                        (buff, count, datatype, root, comm, stream)
#define SHAPE_NcclRecv NcclRecv, int, (void* buff, size_t count, int datatype, int peer, void* comm, void* stream), \
                       (buff, count, datatype, peer, comm, stream)
#define SHAPE_NcclSend NcclSend, int, (void* buff, size_t count, int datatype, int peer, void* comm, void* stream), \
                       (buff, count, datatype, peer, comm, stream)
#define SHAPE_NcclBroadcast NcclBroadcast, int, \
    (const void* send, void* recv, size_t count, int datatype, int root, void* comm, void* stream), \
    (send, recv, count, datatype, root, comm, stream)
#define SHAPE_NcclReduce NcclReduce, int, \
    (const void* send, void* recv, size_t count, int datatype, int op, void* comm, void* stream), \
    (send, recv, count, datatype, op, comm, stream)

// A row's exported definition: hook_<id>, named `mangled` in the dynamic
// symbol table, one call into its shape's forwarder; and its first call,
// where g_originals starts: it looks the original up, then calls it.
#define INTERPOSER(id, kernel, mangled, forwarder, result, parameters, arguments)                \
  extern "C" __attribute__((visibility("default"))) result hook_##id parameters __asm__(mangled); \
  result hook_##id parameters { return forwarder<HookId::id, kernel>::forward arguments; }         \
  result first_call_##id parameters {                                                           \
    return reinterpret_cast<result(*) parameters>(resolve_original(HookId::id)) arguments;      \
  }
#define APPLY(macro, ...) macro(__VA_ARGS__)
#define HOOK(id, library, shape, kernel, mangled) APPLY(INTERPOSER, id, kernel, mangled, SHAPE_##shape)
#include "hooks.def"
#undef HOOK

#define HOOK(id, library, shape, kernel, mangled) reinterpret_cast<void*>(&first_call_##id),
void* g_originals[kHookCount] = {
#include "hooks.def"
};
void* const g_first_calls[kHookCount] = {
#include "hooks.def"
};
#undef HOOK
#define HOOK(id, library, shape, kernel, mangled) reinterpret_cast<void*>(&hook_##id),
void* const g_interposers[kHookCount] = {
#include "hooks.def"
};
#undef HOOK

}  // namespace fsdpskip
