// libfsdpskip_torch.so: the C adapter between the preload's hook table and
// the Tracker (its work at exit and its stops: plugin_exit.cc).
#include <ATen/ops/empty.h>
#include <unistd.h>

#include <string>
#include <type_traits>

#include "collective_side.h"
#include "fault_point.h"
#include "plugin_detail.h"

#ifndef FSDPSKIP_TORCH_IDENTITY
#error "FSDPSKIP_TORCH_IDENTITY must name the libtorch this plugin is built for"
#endif

// Read by the preload from the file, before it decides to dlopen us: the
// libtorch we are built for and the plugin ABI we speak.
__attribute__((section(FSDPSKIP_TORCH_ID_SECTION), used)) static const char kTorchIdentity[] =
    "abi=" FSDPSKIP_PLUGIN_ABI_TEXT "\n" FSDPSKIP_TORCH_IDENTITY;  // abi first: a long libtorch path cannot cut it off

namespace fsdpskip {
namespace {

const at::Tensor& tensor(const void* pointer) { return *static_cast<const at::Tensor*>(pointer); }

// normal_'s and uniform_'s generator argument, passed by reference (it is not trivially copyable).
const compat::GeneratorArgument* generator_argument(const void* pointer) {
  return static_cast<const compat::GeneratorArgument*>(pointer);
}

// "gloo broadcast (root 1 of a group of 2, this rank 1)", for a backend
// (compat::CollectiveBackend) or a c10d::ProcessGroup alike.
template <typename Group>
std::string collective_text(const Group& group, const char* collective, int64_t root) {
  std::string text = group.getBackendName() + " " + collective + " (";
  if (root >= 0) text += "root " + std::to_string(root) + " of ";
  return text + "a group of " + std::to_string(group.getSize()) + ", this rank " + std::to_string(group.getRank()) +
         ")";
}

// Every callback runs inside `guarded`: nothing unwinds out of the plugin
// into the preload (which has no C++ runtime) or torch's frames between
// them. A failure (an allocation) is counted, said once, and answered with
// `failed`: the call then runs as without fsdpskip (plugin_abi.h). The
// tracker commits a storage's state only once nothing more can fail, so an
// answer of failure never leaves a storage skipped but unaccounted.
template <typename Body, typename Result = std::invoke_result_t<Body>>
Result guarded(const char* callback, Result failed, Body&& body) noexcept {
  try {
    FaultPoint fault(callback);
    return body();
  } catch (const std::exception& error) {
    internal_error(callback, error.what());
  } catch (...) {
    internal_error(callback, "an unknown exception");
  }
  return failed;
}

template <typename Body>
void guarded(const char* callback, Body&& body) noexcept {
  guarded(callback, true, [&] { return body(), true; });
}

const fsdpskip_plugin kPlugin = {
    FSDPSKIP_PLUGIN_ABI,
    [](fsdpskip_kernel kernel, void* self, const void* generator) noexcept {
      return guarded("decide_init", FSDPSKIP_RUN,
                     [&] { return Tracker::instance().decide_init(kernel, tensor(self), generator_argument(generator)); });
    },
    [](void* self, const void* scalar) noexcept {
      return guarded("decide_fill", FSDPSKIP_RUN, [&] {
        return Tracker::instance().decide_fill(tensor(self), *static_cast<const c10::Scalar*>(scalar));
      });
    },
    [](void* dst, const void* src) noexcept {
      return guarded("decide_copy", FSDPSKIP_RUN, [&] { return Tracker::instance().decide_copy(tensor(dst), tensor(src)); });
    },
    [](fsdpskip_kernel kernel, const void* self, const void* out, const fsdpskip_call_arguments* arguments) noexcept {
      return guarded("decide_chain", FSDPSKIP_RUN,
                     [&] { return Tracker::instance().decide_chain(kernel, tensor(self), tensor(out), *arguments); });
    },
    [](fsdpskip_kernel kernel, const void* self, const void* other) noexcept {
      guarded("reading", [&] { Tracker::instance().reading(kernel, tensor(self), other); });
    },
    [](const void* self, int slot) noexcept -> void* {
      return guarded("stand_in_like", static_cast<void*>(nullptr), [&]() -> void* {
        thread_local at::Tensor stand_ins[2];
        stand_ins[slot] = at::empty({0}, tensor(self).options());
        return &stand_ins[slot];
      });
    },
    [](const void* generator) noexcept -> void* {
      return guarded("stand_in_generator", static_cast<void*>(nullptr), [&]() -> void* {
        thread_local compat::GeneratorArgument copy;
        copy = *generator_argument(generator);
        return &copy;
      });
    },
    [](fsdpskip_kernel kernel, void* self, const void* generator, const fsdpskip_call_arguments* arguments) noexcept {
      return guarded("skipped", false, [&] {
        return Tracker::instance().skipped(kernel, tensor(self), generator_argument(generator), arguments);
      });
    },
    [](void* self) noexcept {
      return guarded("zero_lazily", false, [&] { return Tracker::instance().zero_lazily(tensor(self)), true; });
    },
    [](fsdpskip_kernel kernel, void* self, uint64_t ns) noexcept {
      guarded("audited", [&] { Tracker::instance().audited(kernel, tensor(self), ns); });
    },
    [](void* dst, const void* src) noexcept {
      guarded("copied", [&] { Tracker::instance().copied(tensor(dst), tensor(src)); });
    },
    [](void* impl) noexcept {
      guarded("requires_grad_set",
              [&] { Tracker::instance().requires_grad_set(static_cast<c10::TensorImpl*>(impl)); });
    },
    [](void* self) noexcept {
      guarded("data_set", [&] { Tracker::instance().data_set(*static_cast<const at::TensorBase*>(self)); });
    },
    [](void* generator, bool reads) noexcept {
      guarded("generator_touched", [&] {
        Tracker::instance().generator_touched(static_cast<c10::GeneratorImpl*>(generator), reads);
      });
    },
    [](const void* group, void* tensors, const void* options) noexcept {
      guarded("broadcast_started", [&] {
        const compat::CollectiveBackend& backend = compat::backend(group);
        int64_t root = static_cast<const c10d::BroadcastOptions*>(options)->rootRank;
        Transfer transfer(FSDPSKIP_TRANSFER_BROADCAST, root, backend.getRank());
        transfer.tensors = static_cast<const std::vector<at::Tensor>*>(tensors);
        transfer.describe = [&backend, root] { return collective_text(backend, "broadcast", root); };
        transfer_started(transfer);
      });
    },
    [](const void* group, const void* tensors, size_t count, int root) noexcept {
      guarded("coalesced_broadcast_started", [&] {
        const c10d::ProcessGroup& process_group = **static_cast<const c10::intrusive_ptr<c10d::ProcessGroup>*>(group);
        const auto* first = static_cast<const at::Tensor*>(tensors);
        std::vector<at::Tensor> list(first, first + count);
        Transfer transfer(FSDPSKIP_TRANSFER_BROADCAST, root, process_group.getRank());
        transfer.tensors = &list;
        transfer.coalesced = true;
        transfer.describe = [&process_group, root] {
          return collective_text(process_group, "coalesced broadcast", root);
        };
        transfer_started(transfer);
      });
    },
    [](const void* group, const void* tensors, bool nested, const char* collective) noexcept {
      guarded("sending", [&] {
        const compat::CollectiveBackend& backend = compat::backend(group);
        Transfer transfer(FSDPSKIP_TRANSFER_SEND, -1, backend.getRank());
        std::vector<at::Tensor> flattened;
        if (nested) {
          for (const auto& inner : *static_cast<const std::vector<std::vector<at::Tensor>>*>(tensors))
            flattened.insert(flattened.end(), inner.begin(), inner.end());
          transfer.tensors = &flattened;
        } else {
          transfer.tensors = static_cast<const std::vector<at::Tensor>*>(tensors);
        }
        if (transfer.tensors->empty()) return;  // a scatter's inputs are the root's alone
        transfer.describe = [&backend, collective] { return collective_text(backend, collective, -1); };
        transfer_started(transfer);
      });
    },
    [](const void* tensors) noexcept {
      guarded("receiving", [&] {
        const auto& list = *static_cast<const std::vector<at::Tensor>*>(tensors);
        // Only a call gloo accepts (checkSingleTensor): one dense tensor,
        // contiguous in its memory format. Any other raises, and its
        // storage must keep its recipe.
        if (list.size() != 1 || list[0].layout() != c10::kStrided ||
            !list[0].is_contiguous(list[0].suggest_memory_format()))
          return;
        Transfer transfer(FSDPSKIP_TRANSFER_RECEIVE, -1, -1);
        transfer.tensors = &list;
        transfer_started(transfer);
      });
    },
    [](const fsdpskip_nccl_call* call) noexcept {
      guarded("nccl_transfer", [&] {
        Transfer transfer(call->transfer, call->root, call->rank);
        transfer.raw = true;
        transfer.send = call->send;
        transfer.receive = call->receive;
        transfer.bytes = call->bytes;
        transfer.describe = [call] {
          std::string where = call->transfer == FSDPSKIP_TRANSFER_BROADCAST
                                  ? ", root " + std::to_string(call->root) + ", this rank " +
                                        (call->rank >= 0 ? std::to_string(call->rank) : "unknown")
                                  : "";
          return std::string(call->name) + " (NCCL's C API" + where + ")";
        };
        transfer_started(transfer);
      });
    },
    [](const void* tensors, size_t bytes) noexcept {
      guarded("collective_started", [&] {
        if (tensors != nullptr)
          for (const at::Tensor& tensor : *static_cast<const std::vector<at::Tensor>*>(tensors))
            if (tensor.defined()) bytes += tensor.numel() * tensor.itemsize();
        Tracker::TrainingStart start = Tracker::instance().collective_started(bytes);
        if (start.began) training_began(bytes, start.rank0_data_seen);
      });
    },
    [](bool opens_loading) noexcept {
      guarded("policy_changed", [&] {
        Tracker::instance().set_policy(g_preload->active, g_preload->mode == FSDPSKIP_MODE_AUDIT,
                                       g_preload->log_level, g_preload->stacks, opens_loading);
      });
    },
    [] { guarded("finish", finish); },
    [](const void* address, size_t bytes, bool fault, const char* access) noexcept {
      return guarded("touched", false, [&] { return Tracker::instance().touched(address, bytes, fault, access); });
    },
    []() noexcept { return OwnedPages::instance().guarded_count(); },
};

}  // namespace
}  // namespace fsdpskip

extern "C" __attribute__((visibility("default"))) const fsdpskip_plugin* fsdpskip_plugin_load(
    const fsdpskip_host* host) {
  using namespace fsdpskip;
  // From ABI 4 on, `abi` and `say` come first in every version of the host;
  // an older preload has no sink to say it through.
  if (host->abi < 4) {
    static const char kOlder[] = "fsdpskip: warning: libfsdpskip.so is older than libfsdpskip_torch.so (plugin ABI); "
                                 "inactive\n";
    if (write(STDERR_FILENO, kOlder, sizeof kOlder - 1) < 0) return nullptr;
    return nullptr;
  }
  if (host->abi != FSDPSKIP_PLUGIN_ABI) {
    host->say(FSDPSKIP_MESSAGE_WARNING,
              "the preload and libfsdpskip_torch.so come from different builds (plugin ABI); inactive");
    return nullptr;
  }
  g_preload = host;
  Tracker::instance().start(host->say);
  Tracker::instance().set_stop(materialize_failed);
  Tracker::instance().set_policy(host->active, host->mode == FSDPSKIP_MODE_AUDIT, host->log_level, host->stacks,
                                 false);
  host->say(FSDPSKIP_MESSAGE_DEBUG, ("Python frames: " + Tracker::instance().python_found()).c_str());
  Tracker::instance().publish_owing_generators(host->owing_generators, host->watch_draws);
  return &kPlugin;
}
