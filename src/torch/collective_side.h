// Which side of a data transfer this rank is on, decided in one place for
// every collective and point-to-point call fsdpskip sees (c10d's and NCCL's
// C API), from the call itself: a broadcast's root against this rank's
// place in its group, never a convention. The sending side gives its
// skipped storages their values first (or stops the process before they
// leave); the receiving side has them resolved by the data that arrives.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "../common/plugin_abi.h"

namespace fsdpskip {

enum class Side { kSends, kReceives };

// One call that moves data between ranks, as the plugin's adapters read it.
struct Transfer {
  Transfer(fsdpskip_transfer kind, int64_t root, int64_t rank) : kind(kind), root(root), rank(rank) {}

  fsdpskip_transfer kind;
  int64_t root;  // a broadcast's, as a rank of its group; else -1
  int64_t rank;  // this rank's place in the group; -1 when it cannot be told
  // c10d's calls: the tensors it reads or writes (the caller's, for the
  // call). c10d::broadcast_coalesced flattens them into buckets (reading
  // them) before it broadcasts those.
  const std::vector<at::Tensor>* tensors = nullptr;
  bool coalesced = false;
  // NCCL's C API: raw memory.
  bool raw = false;
  const void* send = nullptr;
  void* receive = nullptr;
  size_t bytes = 0;
  // For a stop's line, made only then: "gloo broadcast (root 1 of a group
  // of 2, this rank 1)". Every collective passes here, training's too.
  std::function<std::string()> describe;
};

// A broadcast's root sends, and so does a rank whose place cannot be told
// (its skipped storages are never taken as received); a group of one is its
// own source: its broadcast writes nothing.
inline Side side_of(const Transfer& transfer) {
  switch (transfer.kind) {
    case FSDPSKIP_TRANSFER_SEND:
      return Side::kSends;
    case FSDPSKIP_TRANSFER_RECEIVE:
      return Side::kReceives;
    case FSDPSKIP_TRANSFER_BROADCAST:
      return transfer.rank >= 0 && transfer.rank != transfer.root ? Side::kReceives : Side::kSends;
  }
  return Side::kSends;  // a kind this build does not know: never taken as received
}

// Tells the tracker what the transfer does to this rank's skipped storages,
// on its side; stops the process before skipped values would be sent.
void transfer_started(const Transfer& transfer);

}  // namespace fsdpskip
