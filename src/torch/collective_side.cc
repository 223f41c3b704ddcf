// The one dispatch of a transfer to the tracker, on this rank's side (collective_side.h).
#include "collective_side.h"

#include "plugin_detail.h"

namespace fsdpskip {

void transfer_started(const Transfer& transfer) {
  Tracker& tracker = Tracker::instance();
  if (side_of(transfer) == Side::kSends) {
    std::vector<Tracker::Unsendable> unsendable =
        transfer.raw ? tracker.sending_raw(transfer.send, transfer.bytes) : tracker.sending(*transfer.tensors);
    if (!unsendable.empty()) stop_unless_sendable(unsendable, transfer.describe());
  } else if (transfer.raw) {
    tracker.received(transfer.receive, transfer.bytes);
  } else if (transfer.coalesced) {
    tracker.coalesced_broadcast_started(*transfer.tensors);
  } else {
    tracker.broadcast_started(*transfer.tensors);
  }
}

}  // namespace fsdpskip
