// Every difference between the torch releases fsdpskip builds against
// (1.13, 2.6, 2.14, 2.15) lives here.
#pragma once

#include <ATen/ops/normal_native.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace fsdpskip::compat {

// 2.1 split StorageImpl::data_ptr() into a const data_ptr() and
// mutable_data_ptr(); detect which one this torch has.
template <typename Storage>
auto mutable_data_ptr(Storage& storage, int) -> decltype(storage.mutable_data_ptr()) {
  return storage.mutable_data_ptr();
}
template <typename Storage>
c10::DataPtr& mutable_data_ptr(Storage& storage, long) {
  return storage.data_ptr();
}
inline c10::DataPtr& data_ptr(c10::StorageImpl& storage) { return mutable_data_ptr(storage, 0); }

// The StorageImpl behind a tensor, or nullptr (no storage, or no data yet:
// meta tensors, empty tensors, sparse layouts).
inline c10::StorageImpl* storage_of(const c10::TensorImpl* tensor) {
  if (tensor == nullptr || !tensor->has_storage()) return nullptr;
  c10::StorageImpl* storage = tensor->unsafe_storage().unsafeGetStorageImpl();
  if (storage == nullptr || storage->nbytes() == 0) return nullptr;
  return data_ptr(*storage).get() != nullptr ? storage : nullptr;
}

// The optional generator normal_ and uniform_ take (c10::optional up to 2.1,
// std::optional from 2.2), read off the kernel's own declaration.
template <typename Result, typename Self, typename Generator>
Generator generator_parameter(Result (*)(Self, double, double, Generator));
using GeneratorArgument = decltype(generator_parameter(&at::native::normal_));

// The class ProcessGroupGloo and ProcessGroupNCCL derive from, the `this`
// of their collectives: ProcessGroup up to 1.13, Backend from 2.0. Each
// derives from it alone (single inheritance: the base is at the same
// address), and its rank in the group is a member read inline.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif
inline const CollectiveBackend& backend(const void* collective_this) {
  return *static_cast<const CollectiveBackend*>(collective_this);
}

}  // namespace fsdpskip::compat
