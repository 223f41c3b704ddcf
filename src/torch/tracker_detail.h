// What the tracker's files (tracker*.cc, one job each) share: torch's own zeroing, a tensor's storage and byte
// range, and a skipped storage's description. Internal to the tracker.
#pragma once

#include "tracker.h"

#include <c10/core/CPUAllocator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/le.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/alloc_cpu.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "compat.h"
#include "owned_pages.h"
#include "python_frames.h"
#include "random_draws.h"
#include "zero_pages.h"

namespace fsdpskip {
namespace tracker_detail {

inline bool is_random(fsdpskip_kernel kernel) { return kernel == FSDPSKIP_NORMAL || kernel == FSDPSKIP_UNIFORM; }

// Zeroes a tensor with torch's own zero_ (on a device: the current stream).
// False when torch refused.
inline bool zero_tensor(const at::Tensor& tensor) {
  try {
    OwnKernels own;
    tensor.zero_();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Zeroes a whole storage with torch's own kernels (on a device: the current
// stream), through a byte view of it. False when torch refused.
inline bool zero_with_torch(c10::StorageImpl* storage) {
  try {
    at::Tensor bytes = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage->device()));
    bytes.set_(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)), 0,
               {static_cast<int64_t>(storage->nbytes())}, {1});
    return zero_tensor(bytes);
  } catch (const std::exception&) {
    return false;
  }
}

inline c10::StorageImpl* storage_of(const at::TensorBase& tensor) {
  return tensor.defined() ? compat::storage_of(tensor.unsafeGetTensorImpl()) : nullptr;
}

// The tensor's own bytes, when they are one contiguous range.
inline bool contiguous_range(const at::Tensor& tensor, char** begin, size_t* bytes) {
  if (!tensor.is_contiguous()) return false;
  c10::StorageImpl* storage = storage_of(tensor);
  if (storage == nullptr) return false;
  *begin = static_cast<char*>(compat::data_ptr(*storage).get()) + tensor.storage_offset() * tensor.itemsize();
  *bytes = tensor.numel() * tensor.itemsize();
  return true;
}

// True when `tensor` has every byte of `storage`, each once, whatever its
// strides (channels_last, a transpose): what a write through it covers is
// computed from its bytes, not its layout.
inline bool covers_storage(const at::Tensor& tensor, const c10::StorageImpl* storage) {
  return tensor.storage_offset() == 0 && tensor.is_non_overlapping_and_dense() &&
         static_cast<size_t>(tensor.numel() * tensor.itemsize()) == storage->nbytes();
}

// What a skipped storage or a placeholder is, for its site (its stack comes later).
inline std::unique_ptr<SkipSite> site_of(const c10::TensorImpl& tensor, const c10::StorageImpl& storage,
                                  fsdpskip_kernel first_kernel) {
  static std::atomic<uint64_t> made{0};
  auto site = std::make_unique<SkipSite>();
  site->order = made.fetch_add(1, std::memory_order_relaxed);
  site->shape = shape_string(tensor.sizes());
  site->dtype = std::string(c10::toString(c10::typeMetaToScalarType(tensor.dtype())));
  site->device = tensor.device().str();
  site->bytes = storage.nbytes();
  site->first_kernel = first_kernel;
  return site;
}

// Sites in the order they were made, not the table's: stderr lists the
// first of them (capped), and a job lists the same ones run after run.
inline void in_order_made(std::vector<SkipSite>& sites) {
  std::sort(sites.begin(), sites.end(), [](const SkipSite& a, const SkipSite& b) { return a.order < b.order; });
}


}  // namespace tracker_detail
}  // namespace fsdpskip
