#include "chain_step.h"

#include <ATen/ops/add.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/erfinv.h>
#include <ATen/ops/mul.h>
#include <ATen/record_function.h>

#include <stdexcept>
#include <vector>

#include "replay.h"

namespace fsdpskip {
namespace {

const at::Tensor* tensor_at(const void* operand) { return static_cast<const at::Tensor*>(operand); }
const c10::Scalar* scalar_at(const void* operand) { return static_cast<const c10::Scalar*>(operand); }

// The same tensor: one TensorImpl, or one view of the same storage.
bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl() ||
         (a.defined() && b.defined() && a.has_storage() && b.has_storage() &&
          a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl() &&
          a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
          a.dtype() == b.dtype());
}

bool one_cpu_element(const at::Tensor* tensor) {
  return tensor != nullptr && tensor->defined() && tensor->device().is_cpu() && tensor->dim() == 0;
}

}  // namespace

const char* describe_step(fsdpskip_kernel kernel, const at::Tensor& out, const fsdpskip_call_arguments& arguments,
                          ChainStep* step) {
  const at::Tensor* self = tensor_at(arguments.operands[0]);
  ChainStep found;
  const at::Tensor* scalar = nullptr;
  bool in_place = self != nullptr && same(*self, out);
  if (kernel == FSDPSKIP_MUL || kernel == FSDPSKIP_ADD) {
    const at::Tensor* other = tensor_at(arguments.operands[1]);
    scalar = in_place ? other : nullptr;
    // mul_out(out, scalar, out): the factors the other way round.
    if (kernel == FSDPSKIP_MUL && !in_place && other != nullptr && same(*other, out)) {
      in_place = true;
      scalar = self;
      found.scalar_first = true;
    }
  }
  if (!in_place) return "a chain step that does not rewrite its tensor in place";
  if (kernel == FSDPSKIP_MUL || kernel == FSDPSKIP_ADD) {
    if (!one_cpu_element(scalar)) return "a chain step whose operand is not one element on the CPU";
    found.scalar = *scalar;
  }
  if (kernel == FSDPSKIP_ADD) found.alpha = *scalar_at(arguments.operands[2]);
  if (kernel == FSDPSKIP_CLAMP) {
    if (arguments.operands[1]) found.min = *scalar_at(arguments.operands[1]);
    if (arguments.operands[2]) found.max = *scalar_at(arguments.operands[2]);
  }
  if (step == nullptr) {
    // Deciding: the trial, once per call.
    try {
      OwnKernels own;
      at::RecordFunctionGuard unprofiled(false);
      // One element, of out's dtype and number of dimensions (0-dim operands promote alike).
      run_step(kernel, found, at::empty(std::vector<int64_t>(out.dim(), 1), out.options()));
    } catch (const c10::Error&) {
      return "its kernel raises for this dtype";
    }
    return nullptr;
  }
  *step = std::move(found);
  if (scalar != nullptr) {
    // A copy: a later write to the caller's tensor cannot change the recipe.
    step->scalar = scalar->detach().clone();
    step->scalar.unsafeGetTensorImpl()->set_wrapped_number(scalar->unsafeGetTensorImpl()->is_wrapped_number());
  }
  return nullptr;
}

void run_step(fsdpskip_kernel kernel, const ChainStep& step, const at::Tensor& rewritten) {
  at::Tensor out = rewritten;  // the out= functions take a Tensor&
  switch (kernel) {
    case FSDPSKIP_ERFINV: at::erfinv_out(out, rewritten); break;
    case FSDPSKIP_MUL:
      step.scalar_first ? at::mul_out(out, step.scalar, rewritten) : at::mul_out(out, rewritten, step.scalar);
      break;
    case FSDPSKIP_ADD: at::add_out(out, rewritten, step.scalar, *step.alpha); break;
    case FSDPSKIP_CLAMP: at::clamp_out(out, rewritten, step.min, step.max); break;
    default: throw std::logic_error("not a chain step");
  }
}

}  // namespace fsdpskip
