// What a skipped storage skipped, and the replay that writes it after all.
//
// A skipped init is deferred, not dropped: when a skipped storage is about
// to leave its rank (this rank is the source of a sync, which the
// collective's root says, never a convention), it is first given the values
// it would have had without fsdpskip, bitwise, by running its skipped calls
// again in their order: the kernel, its scalar arguments, the tensor it
// wrote (dtype and place in the storage) and, for normal_ and uniform_,
// where their generator stood. The sources then pay the init they would
// have paid anyway; every receiving rank keeps its saving.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/MT19937RNGEngine.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "../common/plugin_abi.h"
#include "chain_step.h"

namespace fsdpskip {

// Set while this thread runs fsdpskip's own kernels (its zeros, a replay):
// the interposers run them, never skip them.
bool running_own_kernels();
struct OwnKernels {
  bool previous;
  OwnKernels();
  ~OwnKernels();
};

// A CPU generator's state when a run of skipped calls began drawing from it.
// Every skipped call that drew from that generator since, while nothing
// else moved it, stands at `start` advanced by its offset. The cursor is
// the state after the last call replayed from it: calls replayed in their
// order cost what drawing them would have.
struct GeneratorSnapshot {
  at::mt19937_data_pod start;
  std::mutex mutex;
  uint64_t cursor_draws = 0;
  at::mt19937_data_pod cursor;
};

// Where a tensor lies in its storage.
struct Geometry {
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::SmallVector<int64_t, 4> sizes, strides;
  int64_t offset = 0;
};

struct SkippedCall;
using SkippedCalls = std::vector<SkippedCall>;

// A skipped copy_'s source: what its skipped storage had skipped by then,
// the storage's size, and where the source tensor lay in it.
struct CopySource {
  SkippedCalls calls;
  size_t bytes = 0;
  Geometry geometry;
};

struct SkippedCall {
  fsdpskip_kernel kernel = FSDPSKIP_NORMAL;
  Geometry written;
  double first = 0, second = 0;  // normal_'s mean and std, uniform_'s from and to
  c10::Scalar value;             // fill_'s
  std::shared_ptr<GeneratorSnapshot> snapshot;  // normal_, uniform_: where they drew from,
  uint64_t offset = 0;                          // this many outputs past its start
  std::shared_ptr<const CopySource> source;     // copy_ from a skipped storage
  std::shared_ptr<const ChainStep> step;        // a chain step's operands
};

Geometry geometry_of(const at::Tensor& tensor);

// A skipped call on `self` with the interposer's `arguments`, without its
// generator's position or a copy's source (the tracker's to fill in); or,
// with `*why` set, one that cannot be replayed. Throws only what an
// allocation throws.
// A chain step (chain_step.h) is replayable when it rewrites its tensor in
// place with scalar operands.
SkippedCall describe_call(fsdpskip_kernel kernel, const at::Tensor& self, const fsdpskip_call_arguments* arguments,
                          const char** why);

// Writes into `storage` what `calls` would have written there, in their
// order, with torch's own kernels. Throws what torch throws.
void replay(c10::StorageImpl* storage, const SkippedCalls& calls);

// The bookkeeping's bytes for one skipped call, its tensor of up to four
// dimensions inline (docs/limits.md's figure for a model of many parameters).
constexpr size_t kSkippedCallBytes = sizeof(SkippedCall);

}  // namespace fsdpskip
