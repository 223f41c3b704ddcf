#include "replay.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/record_function.h>

#include <algorithm>

#include "random_draws.h"

namespace fsdpskip {
namespace {

thread_local bool t_own_kernels = false;


// A tensor viewing `storage` as `geometry` says.
at::Tensor view_of(c10::StorageImpl* storage, const Geometry& geometry) {
  at::Tensor view = at::empty({0}, at::TensorOptions().dtype(geometry.dtype).device(storage->device()));
  view.set_(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)), geometry.offset,
            geometry.sizes, geometry.strides);
  return view;
}

// A fresh CPU generator standing where `call` drew from; the snapshot's
// cursor moves past the call once its kernel ran (`after`).
at::Generator generator_before(const SkippedCall& call) {
  GeneratorSnapshot& snapshot = *call.snapshot;
  at::mt19937_data_pod state;
  {
    std::lock_guard<std::mutex> lock(snapshot.mutex);
    bool from_cursor = snapshot.cursor_draws <= call.offset;
    state = from_cursor ? snapshot.cursor : snapshot.start;
    discard_draws(state, call.offset - (from_cursor ? snapshot.cursor_draws : 0));
  }
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>();
  at::mt19937 engine;
  engine.set_data(state);
  at::check_generator<at::CPUGeneratorImpl>(generator)->set_engine(engine);
  return generator;
}

void moved_past(const SkippedCall& call, const at::Generator& generator, uint64_t drawn) {
  at::mt19937_data_pod state = at::check_generator<at::CPUGeneratorImpl>(generator)->engine().data();
  std::lock_guard<std::mutex> lock(call.snapshot->mutex);
  call.snapshot->cursor = state;
  call.snapshot->cursor_draws = call.offset + drawn;
}

}  // namespace

bool running_own_kernels() { return t_own_kernels; }
OwnKernels::OwnKernels() : previous(t_own_kernels) { t_own_kernels = true; }
OwnKernels::~OwnKernels() { t_own_kernels = previous; }

Geometry geometry_of(const at::Tensor& tensor) {
  Geometry geometry;
  geometry.dtype = tensor.scalar_type();
  geometry.sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
  geometry.strides.assign(tensor.strides().begin(), tensor.strides().end());
  geometry.offset = tensor.storage_offset();
  return geometry;
}

SkippedCall describe_call(fsdpskip_kernel kernel, const at::Tensor& self, const fsdpskip_call_arguments* arguments,
                          const char** why) {
  SkippedCall call;
  call.kernel = kernel;
  call.written = geometry_of(self);
  *why = nullptr;
  if (fsdpskip_role_of(kernel) == FSDPSKIP_ROLE_STEP) {
    auto step = std::make_shared<ChainStep>();
    *why = describe_step(kernel, self, *arguments, step.get());
    call.step = std::move(step);
    return call;
  }
  call.first = arguments->first;
  call.second = arguments->second;
  if (kernel == FSDPSKIP_FILL && arguments->scalar) {
    call.value = *static_cast<const c10::Scalar*>(arguments->value);
  } else if (kernel == FSDPSKIP_FILL) {
    // fill_(Tensor): a one-element value on the CPU is read once, as the kernel would.
    const at::Tensor& value = *static_cast<const at::Tensor*>(arguments->value);
    if (value.defined() && value.device().is_cpu() && value.numel() == 1) call.value = value.item();
    else *why = "a fill_ whose value is a tensor on a device is not replayed";
  }
  return call;
}

void replay(c10::StorageImpl* storage, const SkippedCalls& calls) {
  OwnKernels own;
  at::RecordFunctionGuard unprofiled(false);  // the profiler sees the program's kernels, not a replay's
  for (const SkippedCall& call : calls) {
    at::Tensor written = view_of(storage, call.written);
    switch (call.kernel) {
      case FSDPSKIP_NORMAL:
      case FSDPSKIP_UNIFORM: {
        at::Generator generator = generator_before(call);
        uint64_t drawn = random_draws(call.kernel, written).value();  // it was counted when skipped
        if (call.kernel == FSDPSKIP_NORMAL) written.normal_(call.first, call.second, generator);
        else written.uniform_(call.first, call.second, generator);
        moved_past(call, generator, drawn);
        break;
      }
      case FSDPSKIP_ZERO: written.zero_(); break;
      case FSDPSKIP_FILL: written.fill_(call.value); break;
      case FSDPSKIP_COPY: {
        // The source as it was then, rebuilt in scratch memory of its size.
        // Zeros: a recipe that begins with a partial write holds zeros elsewhere.
        at::Tensor scratch = at::zeros({static_cast<int64_t>(call.source->bytes)},
                                       at::TensorOptions().dtype(at::kByte).device(storage->device()));
        c10::StorageImpl* source = scratch.storage().unsafeGetStorageImpl();
        replay(source, call.source->calls);
        written.copy_(view_of(source, call.source->geometry));
        break;
      }
      case FSDPSKIP_ERFINV:
      case FSDPSKIP_MUL:
      case FSDPSKIP_ADD:
      case FSDPSKIP_CLAMP: run_step(call.kernel, *call.step, written); break;
      case FSDPSKIP_LT:
      case FSDPSKIP_LE:
      case FSDPSKIP_GT:
      case FSDPSKIP_GE:
      case FSDPSKIP_OR:
      case FSDPSKIP_ANY:
      case FSDPSKIP_KERNEL_COUNT:
      case FSDPSKIP_NO_KERNEL:
        throw std::logic_error("a kernel that reads is never recorded");
    }
  }
}


}  // namespace fsdpskip
