// Every row of hooks.def called through the preload the way torch calls it,
// on whichever architecture this runs: the calls are written against the
// originals' C++ signatures (fixtures/shape_signatures.h), so the compiler
// lays out arguments and results by the platform's C++ ABI on both sides of
// the preload's forwarder, and the stand-in originals (shape_originals.cc)
// and the stand-in plugin (stand_in_plugin.cc) record what reached them.
//
// Run twice by ctest, with the preload: inactive (every call goes straight
// to the original) and active (FSDPSKIP=on, LOCAL_RANK=1, FSDPSKIP_PLUGIN
// naming the stand-in plugin), where each verdict a row can receive is tried
// in turn. The real originals are called through the preload by the
// integration tests (test_forwarder_calls.py).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../fixtures/shape_signatures.h"
#include "../fixtures/stand_in_plugin.h"
#include "hooks.h"

namespace fsdpskip {
void PrintTo(const HookRow& row, std::ostream* out) { *out << row.id; }  // the test's name
}  // namespace fsdpskip

namespace {

using fsdpskip::HookRow;
using fsdpskip::kHookRows;
using Row = HookRow;
constexpr const Row (&kRows)[fsdpskip::kHookCount] = kHookRows;

bool active_run() { return getenv("FSDPSKIP") != nullptr; }

StandInPlugin* plugin_state() {
  void* handle = dlopen(FSDPSKIP_STAND_IN_PLUGIN, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  auto state = reinterpret_cast<StandInPluginState>(dlsym(handle, STAND_IN_PLUGIN_STATE));
  dlclose(handle);  // NOLOAD only added a reference
  return state ? state() : nullptr;
}

// What a plugin callback should have received.
struct Expected {
  const char* callback;
  int kernel;
  std::vector<const void*> pointers;
  size_t bytes = 0;
  std::vector<double> numbers = {};  // skipped()'s arguments' first and second, or nccl_transfer's root and rank
};

class Calls {
 public:
  // Before each call: the verdict the plugin answers, the callback that
  // fails (nullptr: none), records cleared.
  explicit Calls(fsdpskip_verdict verdict, const char* failing = nullptr)
      : plugin_(active_run() ? plugin_state() : nullptr) {
    before_ = shape_original_call()->calls;
    if (plugin_ == nullptr) {
      EXPECT_FALSE(active_run()) << "the stand-in plugin is not loaded in the active run";
      return;
    }
    plugin_->verdict = verdict;
    plugin_->failing = failing;
    plugin_->call_count = 0;
  }
  // The originals ran `count` times since (a failed skip runs it twice: on the stand-in, then on self).
  int originals_since() const { return shape_original_call()->calls - before_; }
  void* stand_in(int slot) const { return plugin_ ? plugin_->stand_ins[slot] : nullptr; }

  // The original ran once, as `function`, with these arguments.
  void original(const char* function, const void* self, std::vector<const void*> pointers = {},
                std::vector<double> numbers = {}, std::vector<long> integers = {}, bool flag = false,
                int runs = 1) const {
    const OriginalCall& call = *shape_original_call();
    ASSERT_EQ(call.calls, before_ + runs) << function << " did not run " << runs << " time(s)";
    EXPECT_STREQ(call.function, function);
    EXPECT_EQ(call.self, self) << function;
    for (size_t i = 0; i < pointers.size(); ++i) EXPECT_EQ(call.pointers[i], pointers[i]) << function << " pointer " << i;
    for (size_t i = 0; i < numbers.size(); ++i) EXPECT_EQ(call.numbers[i], numbers[i]) << function << " double " << i;
    for (size_t i = 0; i < integers.size(); ++i) EXPECT_EQ(call.integers[i], integers[i]) << function << " integer " << i;
    EXPECT_EQ(call.flag, flag) << function;
  }
  void no_original() const { EXPECT_EQ(shape_original_call()->calls, before_) << "the original ran"; }

  // The plugin saw exactly these callbacks (nothing in an inactive run).
  void plugin(const std::vector<Expected>& expected) const {
    if (plugin_ == nullptr) return;
    ASSERT_EQ(plugin_->call_count, static_cast<int>(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i) {
      const PluginCall& call = plugin_->calls[i];
      EXPECT_STREQ(call.callback, expected[i].callback) << "callback " << i;
      EXPECT_EQ(call.kernel, expected[i].kernel) << expected[i].callback;
      for (size_t j = 0; j < expected[i].pointers.size(); ++j)
        EXPECT_EQ(call.pointers[j], expected[i].pointers[j]) << expected[i].callback << " pointer " << j;
      EXPECT_EQ(call.bytes, expected[i].bytes) << expected[i].callback;
      for (size_t j = 0; j < expected[i].numbers.size(); ++j)
        EXPECT_EQ(call.numbers[j], expected[i].numbers[j]) << expected[i].callback << " number " << j;
    }
  }

 private:
  StandInPlugin* plugin_;
  int before_;
};

// What the plugin is told to answer for one call, and which callback fails.
struct Script {
  fsdpskip_verdict verdict;
  const char* failing = nullptr;
};

// The scripts a kind of call can get; an inactive run tries one (no plugin).
std::vector<Script> scripts(std::vector<Script> all) {
  return active_run() ? all : std::vector<Script>{{FSDPSKIP_RUN}};
}

std::string script_text(const Script& script) {
  return "verdict " + std::to_string(script.verdict) + (script.failing ? std::string(", ") + script.failing + " fails" : "");
}

// normal_, uniform_, zero_, fill_(Tensor), fill_(Scalar): `call(self)` makes
// the call and returns its result; `decision` is the decide_* callback
// expected first, with `decision_argument` after self (normal_'s and
// uniform_'s: the generator's impl, also passed to skipped()); `original(calls,
// self_seen, runs)` checks the original's last record and how often it ran.
// skipped() gets the call's arguments: `value` (fill_'s) and `numbers`
// (normal_'s and uniform_'s two).
void check_kernel(const Row& row, const char* decision, const void* decision_argument,
                  const std::function<at::Tensor&(at::Tensor&)>& call,
                  const std::function<void(const Calls&, const void*, int)>& original, bool random = false,
                  const void* value = nullptr, std::vector<double> numbers = {0, 0}) {
  std::vector<Script> all = {{FSDPSKIP_RUN}, {FSDPSKIP_SKIP}, {FSDPSKIP_ZERO_LAZILY}, {FSDPSKIP_AUDIT},
                             {FSDPSKIP_SKIP, "stand_in_like"}, {FSDPSKIP_SKIP, "skipped"},
                             {FSDPSKIP_ZERO_LAZILY, "zero_lazily"}};
  if (random) all.push_back({FSDPSKIP_SKIP, "stand_in_generator"});
  for (const Script& script : scripts(all)) {
    SCOPED_TRACE(script_text(script));
    at::Tensor self;
    Calls calls(script.verdict, script.failing);
    at::Tensor& result = call(self);
    Expected decided{decision, decision == std::string("decide_init") ? row.kernel : -1, {&self, decision_argument}};
    if (decision_argument == nullptr && decision != std::string("decide_init")) decided.pointers.pop_back();
    bool skip = script.verdict == FSDPSKIP_SKIP;
    Expected done = skip ? Expected{"skipped", row.kernel, {&self, random ? decision_argument : nullptr, value}, 1,
                                    numbers}
                         : Expected{"zero_lazily", -1, {&self}};
    Expected stand_in{"stand_in_like", 0, {&self}};
    // normal_ and uniform_: the stand-in run gets a copy of the generator argument.
    std::vector<Expected> stand_ins{stand_in};
    if (random) stand_ins.push_back({"stand_in_generator", -1, {decision_argument}});
    auto then = [&](std::vector<Expected> before, std::vector<Expected> after) {
      before.insert(before.end(), after.begin(), after.end());
      return before;
    };
    switch (script.verdict) {
      case FSDPSKIP_SKIP:
      case FSDPSKIP_ZERO_LAZILY:
        if (script.failing == nullptr) {
          // Run on a stand-in (torch's own argument checks), then done by the plugin.
          original(calls, calls.stand_in(0), 1);
          EXPECT_EQ(&result, &self);
          calls.plugin(then(then({decided}, stand_ins), {done}));
        } else if (script.failing == std::string("stand_in_like") ||
                   script.failing == std::string("stand_in_generator")) {
          // No stand-in, or no copy of the generator: the call runs on self, as without fsdpskip.
          original(calls, &self, 1);
          EXPECT_EQ(&result, shape_original_tensor_result());
          calls.plugin(then({decided}, stand_ins));
        } else {
          // The plugin failed after the stand-in ran: the call runs on self too.
          original(calls, &self, 2);
          EXPECT_EQ(&result, shape_original_tensor_result());
          calls.plugin(then(then({decided}, stand_ins), {done}));
        }
        break;
      case FSDPSKIP_AUDIT:
        original(calls, &self, 1);
        EXPECT_EQ(&result, shape_original_tensor_result());
        calls.plugin({decided, {"audited", row.kernel, {&self}}});
        break;
      default:
        original(calls, &self, 1);
        EXPECT_EQ(&result, shape_original_tensor_result());
        calls.plugin({decided});
    }
  }
}

template <typename Optional>
void check_random(const Row& row, bool normal) {
  int generator_impl = 0;
  const double a = 1.5, b = -2.25;  // distinct, so a swap shows
  const char* name = normal ? (std::is_same_v<Optional, std::optional<at::Generator>> ? "normal_(std::optional)"
                                                                                        : "normal_(c10::optional)")
                            : (std::is_same_v<Optional, std::optional<at::Generator>> ? "uniform_(std::optional)"
                                                                                        : "uniform_(c10::optional)");
  check_kernel(
      row, "decide_init", &generator_impl,
      [&](at::Tensor& self) -> at::Tensor& {
        Optional generator{at::Generator(&generator_impl)};
        return normal ? at::native::normal_(self, a, b, generator) : at::native::uniform_(self, a, b, generator);
      },
      [&](const Calls& calls, const void* self, int runs) {
        calls.original(name, self, {&generator_impl}, {a, b}, {}, false, runs);
      },
      true, nullptr, {a, b});
}

// A structured kernel's impl: a chain step (decide_chain, given the
// operands between self and out), or a comparison, `|` or any() (reading,
// then the kernel).
void check_structured(const Row& row, const char* name, const std::function<void(const at::Tensor&)>& call,
                      const void* op, const at::Tensor& self, const void* other,
                      std::vector<const void*> original_pointers) {
  const at::Tensor& out = *static_cast<const at::Tensor*>(original_pointers.back());
  if (fsdpskip_role_of(row.kernel) != FSDPSKIP_ROLE_STEP) {
    Calls calls(FSDPSKIP_RUN);
    call(out);
    calls.original(name, op, original_pointers);
    calls.plugin({{"reading", row.kernel, {&self, other}}});
    return;
  }
  std::vector<const void*> operands(original_pointers.begin() + 1, original_pointers.end() - 1);
  operands.resize(2, nullptr);
  for (const Script& script :
       scripts({{FSDPSKIP_RUN}, {FSDPSKIP_SKIP}, {FSDPSKIP_AUDIT}, {FSDPSKIP_SKIP, "skipped"}})) {
    SCOPED_TRACE(script_text(script));
    Calls calls(script.verdict, script.failing);
    call(out);
    Expected decided{"decide_chain", row.kernel, {&self, &out, operands[0], operands[1]}};
    if (script.verdict == FSDPSKIP_SKIP) {
      // Done by the plugin instead of the kernel; where it failed, the kernel runs.
      if (script.failing) calls.original(name, op, original_pointers);
      else calls.no_original();
      calls.plugin({decided, {"skipped", row.kernel, {&out, nullptr, nullptr, operands[0]}, 1, {0, 0}}});
    } else {
      calls.original(name, op, original_pointers);
      if (script.verdict == FSDPSKIP_AUDIT) calls.plugin({decided, {"audited", row.kernel, {&out}}});
      else calls.plugin({decided});
    }
  }
}

// A gloo point-to-point call on a vector of tensors (send, recv,
// recvAnysource): the original gets the vector and `integers` (the peer's
// rank, the tag); the plugin is told that the tensors leave (`sends`) or
// that another rank's data will write them.
template <typename Call>
void check_point_to_point(const char* name, Call call, std::vector<long> integers, bool sends) {
  c10d::ProcessGroupGloo group;
  std::vector<at::Tensor> tensors(2);
  Calls calls(FSDPSKIP_RUN);
  c10::intrusive_ptr<c10d::Work> work = call(group, tensors);
  EXPECT_EQ(work.target, shape_original_work()) << "the result did not come back";
  calls.original(name, &group, {&tensors}, {}, integers);
  if (sends) calls.plugin({{"sending", 0, {&group, &tensors}}});
  else calls.plugin({{"receiving", -1, {&tensors}}});
}

template <typename Group>
void check_broadcast(const char* name) {
  Group group;
  std::vector<at::Tensor> tensors(2);
  c10d::BroadcastOptions options{0};
  Calls calls(FSDPSKIP_RUN);
  c10::intrusive_ptr<c10d::Work> work = group.broadcast(tensors, options);
  EXPECT_EQ(work.target, shape_original_work()) << "the result did not come back";
  calls.original(name, &group, {&tensors, &options});
  calls.plugin({{"broadcast_started", -1, {&group, &tensors, &options}}});
}

// broadcast_coalesced with the group by value or by const reference: the
// plugin gets the group's address, the tensors and the root.
template <typename Group>
void check_coalesced(const char* name) {
  c10d::ProcessGroup target{0};
  c10::intrusive_ptr<c10d::ProcessGroup> group(&target);
  at::Tensor tensors[3];
  Calls calls(FSDPSKIP_RUN);
  void (*coalesced)(Group, c10::ArrayRef<at::Tensor>, size_t, int) = &c10d::broadcast_coalesced;  // the overload
  coalesced(group, c10::ArrayRef<at::Tensor>{tensors, 3}, 1 << 20, 1);
  calls.original(name, &target, {tensors}, {}, {3, 1 << 20, 1});
  calls.plugin({{"coalesced_broadcast_started", 1, {&target, tensors}, 3}});  // the group's target, as the plugin read it
}

// NCCL's receives and sends: `count` float32 elements (datatype 7); a
// communicator is an int holding this rank's place in it (shape_originals.cc).
constexpr size_t kCount = 3;
constexpr int kFloat32 = 7;

using Check = std::function<void(const Row&)>;

const std::map<std::string, Check>& checks() {
  static const std::map<std::string, Check> table = {
      {"normal_c10_optional", [](const Row& row) { check_random<c10::optional<at::Generator>>(row, true); }},
      {"normal_std_optional", [](const Row& row) { check_random<std::optional<at::Generator>>(row, true); }},
      {"uniform_c10_optional", [](const Row& row) { check_random<c10::optional<at::Generator>>(row, false); }},
      {"uniform_std_optional", [](const Row& row) { check_random<std::optional<at::Generator>>(row, false); }},
      {"zero",
       [](const Row& row) {
         check_kernel(
             row, "decide_init", nullptr, [](at::Tensor& self) -> at::Tensor& { return at::native::zero_(self); },
             [](const Calls& calls, const void* self, int runs) { calls.original("zero_", self, {}, {}, {}, false, runs); });
       }},
      {"fill_scalar",
       [](const Row& row) {
         c10::Scalar value{0.5};
         check_kernel(
             row, "decide_fill", &value,
             [&](at::Tensor& self) -> at::Tensor& { return at::native::fill_(self, value); },
             [&](const Calls& calls, const void* self, int runs) {
               calls.original("fill_(Scalar)", self, {&value}, {0.5}, {}, false, runs);
             },
             false, &value);
       }},
      {"fill_tensor",
       [](const Row& row) {
         at::Tensor value;
         check_kernel(
             row, "decide_init", nullptr,
             [&](at::Tensor& self) -> at::Tensor& { return at::native::fill_(self, value); },
             [&](const Calls& calls, const void* self, int runs) {
               calls.original("fill_(Tensor)", self, {&value}, {}, {}, false, runs);
             },
             false, &value);
       }},
      {"copy",
       [](const Row&) {
         for (bool non_blocking : {false, true})
           for (const Script& script : scripts({{FSDPSKIP_RUN}, {FSDPSKIP_RUN_NOTIFY}, {FSDPSKIP_SKIP}, {FSDPSKIP_AUDIT},
                                                {FSDPSKIP_SKIP, "stand_in_like"}, {FSDPSKIP_SKIP, "skipped"}})) {
             SCOPED_TRACE(script_text(script));
             at::Tensor self, src;
             Calls calls(script.verdict, script.failing);
             at::Tensor& result = at::native::copy_(self, src, non_blocking);
             Expected decided{"decide_copy", -1, {&self, &src}};
             if (script.verdict == FSDPSKIP_SKIP && script.failing == nullptr) {
               // Both tensors' stand-ins: torch checks the pair (dtypes, sizes).
               calls.original("copy_", calls.stand_in(0), {calls.stand_in(1)}, {}, {}, non_blocking);
               EXPECT_EQ(&result, &self);
               calls.plugin({decided, {"stand_in_like", 0, {&self}}, {"stand_in_like", 1, {&src}},
                             {"skipped", FSDPSKIP_COPY, {&self, nullptr, &src}, 1}});
               continue;
             }
             if (script.verdict == FSDPSKIP_SKIP) {
               // No stand-in, or the plugin failed after them: the copy runs as without fsdpskip.
               bool stand_in = script.failing == std::string("stand_in_like");
               calls.original("copy_", &self, {&src}, {}, {}, non_blocking, stand_in ? 1 : 2);
               EXPECT_EQ(&result, shape_original_tensor_result());
               if (stand_in) calls.plugin({decided, {"stand_in_like", 0, {&self}}});
               else calls.plugin({decided, {"stand_in_like", 0, {&self}}, {"stand_in_like", 1, {&src}},
                                  {"skipped", FSDPSKIP_COPY, {&self, nullptr, &src}, 1}});
               continue;
             }
             calls.original("copy_", &self, {&src}, {}, {}, non_blocking);
             EXPECT_EQ(&result, shape_original_tensor_result());
             if (script.verdict == FSDPSKIP_RUN_NOTIFY) calls.plugin({decided, {"copied", -1, {&self, &src}}});
             else if (script.verdict == FSDPSKIP_AUDIT) calls.plugin({decided, {"audited", FSDPSKIP_COPY, {&self}}});
             else calls.plugin({decided});
           }
       }},
      {"set_requires_grad",
       [](const Row&) {
         for (bool requires_grad : {true, false}) {
           c10::TensorImpl impl{};
           Calls calls(FSDPSKIP_RUN);
           impl.set_requires_grad(requires_grad);
           calls.original("set_requires_grad", &impl, {}, {}, {}, requires_grad);
           // Tagged only when it became true, after the original succeeded.
           calls.plugin(requires_grad ? std::vector<Expected>{{"requires_grad_set", -1, {&impl}}} : std::vector<Expected>{});
         }
       }},
      {"set_data",
       [](const Row&) {
         at::TensorBase self{}, new_data{};
         Calls calls(FSDPSKIP_RUN);
         self.set_data(new_data);
         calls.original("set_data", &self, {&new_data});
         calls.plugin({{"data_set", -1, {&self}}});
       }},
      {"generator_get_state",
       [](const Row&) {
         at::CPUGeneratorImpl generator{};
         Calls calls(FSDPSKIP_RUN);
         c10::intrusive_ptr<c10::TensorImpl> state = generator.get_state();
         EXPECT_EQ(state.target, shape_original_state()) << "the result did not come back";
         calls.original("CPUGeneratorImpl::get_state", &generator);
         calls.plugin({{"generator_touched", 1, {&generator}}});
       }},
      {"generator_set_current_seed",
       [](const Row&) {
         at::CPUGeneratorImpl generator{};
         Calls calls(FSDPSKIP_RUN);
         generator.set_current_seed(0x123456789abcull);
         calls.original("CPUGeneratorImpl::set_current_seed", &generator, {}, {}, {0x123456789abcl});
         calls.plugin({{"generator_touched", 0, {&generator}}});
       }},
      {"generator_seed",
       [](const Row&) {
         at::CPUGeneratorImpl generator{};
         Calls calls(FSDPSKIP_RUN);
         EXPECT_EQ(generator.seed(), kShapeOriginalSeed) << "the result did not come back";
         calls.original("CPUGeneratorImpl::seed", &generator);
         calls.plugin({{"generator_touched", 0, {&generator}}});
       }},
      {"generator_set_state",
       [](const Row&) {
         at::CPUGeneratorImpl generator{};
         c10::TensorImpl state{};
         Calls calls(FSDPSKIP_RUN);
         generator.set_state(state);
         calls.original("CPUGeneratorImpl::set_state", &generator, {&state});
         calls.plugin({{"generator_touched", 0, {&generator}}});
       }},
      {"generator_random",
       [](const Row&) {
         at::CPUGeneratorImpl generator{};
         Calls calls(FSDPSKIP_RUN);
         EXPECT_EQ(generator.random(), 0x9e3779b9u) << "the result did not come back";
         calls.original("CPUGeneratorImpl::random", &generator);
         calls.plugin({{"generator_touched", 1, {&generator}}});
       }},
      {"generator_random64",
       [](const Row&) {
         at::CPUGeneratorImpl generator{};
         Calls calls(FSDPSKIP_RUN);
         EXPECT_EQ(generator.random64(), 0x9e3779b97f4a7c15ull) << "the result did not come back";
         calls.original("CPUGeneratorImpl::random64", &generator);
         calls.plugin({{"generator_touched", 1, {&generator}}});
       }},
      {"gloo_broadcast", [](const Row&) { check_broadcast<c10d::ProcessGroupGloo>("ProcessGroupGloo::broadcast"); }},
      {"broadcast_coalesced_by_value",
       [](const Row&) { check_coalesced<c10::intrusive_ptr<c10d::ProcessGroup>>("broadcast_coalesced(by value)"); }},
      {"broadcast_coalesced_by_reference",
       [](const Row&) {
         check_coalesced<const c10::intrusive_ptr<c10d::ProcessGroup>&>("broadcast_coalesced(by reference)");
       }},
      {"gloo_send",
       [](const Row&) {
         check_point_to_point(
             "ProcessGroupGloo::send", [](auto& group, auto& tensors) { return group.send(tensors, 3, 7); }, {3, 7},
             true);
       }},
      {"gloo_recv",
       [](const Row&) {
         check_point_to_point(
             "ProcessGroupGloo::recv", [](auto& group, auto& tensors) { return group.recv(tensors, 3, 7); }, {3, 7},
             false);
       }},
      {"gloo_recv_anysource",
       [](const Row&) {
         check_point_to_point(
             "ProcessGroupGloo::recvAnysource",
             [](auto& group, auto& tensors) { return group.recvAnysource(tensors, 7); }, {7}, false);
       }},
      {"gloo_scatter",
       [](const Row&) {
         c10d::ProcessGroupGloo group;
         std::vector<at::Tensor> outputs(1);
         std::vector<std::vector<at::Tensor>> inputs(1);
         c10d::ScatterOptions options{1};
         Calls calls(FSDPSKIP_RUN);
         c10::intrusive_ptr<c10d::Work> work = group.scatter(outputs, inputs, options);
         EXPECT_EQ(work.target, shape_original_work()) << "the result did not come back";
         calls.original("ProcessGroupGloo::scatter", &group, {&outputs, &inputs, &options});
         calls.plugin({{"sending", 1, {&group, &inputs}}});
       }},
      {"nccl_send",
       [](const Row&) {
         float buffer[kCount];
         int comm = 0, stream;
         Calls calls(FSDPSKIP_RUN);
         EXPECT_EQ(ncclSend(buffer, kCount, kFloat32, 1, &comm, &stream), kShapeOriginalResult);
         calls.original("ncclSend", buffer, {&comm, &stream}, {}, {kCount, kFloat32, 1});
         calls.plugin({{"ncclSend", FSDPSKIP_TRANSFER_SEND, {buffer, nullptr}, sizeof buffer, {-1, -1}}});
       }},
      {"nccl_broadcast", [](const Row&) { check_broadcast<c10d::ProcessGroupNCCL>("ProcessGroupNCCL::broadcast"); }},
      {"erfinv",
       [](const Row& row) {
         at::native::structured_erfinv_out op;
         at::Tensor self;
         at::Tensor out;
         check_structured(row, "erfinv", [&](const at::Tensor& o) { op.impl(self, o); }, &op, self, nullptr, {&self, &out});
       }},
      {"mul",
       [](const Row& row) {
         at::native::structured_mul_out op;
         at::Tensor self, other, out;
         check_structured(row, "mul", [&](const at::Tensor& o) { op.impl(self, other, o); }, &op, self, nullptr,
                          {&self, &other, &out});
       }},
      {"add",
       [](const Row& row) {
         at::native::structured_ufunc_add_CPU op;
         at::Tensor self, other, out;
         c10::Scalar alpha{2.0};
         check_structured(row, "add", [&](const at::Tensor& o) { op.impl(self, other, alpha, o); }, &op, self, nullptr,
                          {&self, &other, &alpha, &out});
       }},
      {"clamp",
       [](const Row& row) {
         at::native::structured_clamp_out op;
         at::Tensor self, out;
         c10::Scalar low{-2.0}, high{2.0};
         check_structured(row, "clamp", [&](const at::Tensor& o) { op.impl(self, {&low}, {&high}, o); }, &op, self,
                          nullptr, {&self, &low, &high, &out});
       }},
      {"lt_scalar",
       [](const Row& row) {
         at::native::structured_lt_Scalar_out op;
         at::Tensor self, out;
         c10::Scalar other{-2.0};
         check_structured(row, "lt", [&](const at::Tensor& o) { op.impl(self, other, o); }, &op, self, &other,
                          {&self, &other, &out});
       }},
      {"le_scalar",
       [](const Row& row) {
         at::native::structured_le_Scalar_out op;
         at::Tensor self, out;
         c10::Scalar other{-2.0};
         check_structured(row, "le", [&](const at::Tensor& o) { op.impl(self, other, o); }, &op, self, &other,
                          {&self, &other, &out});
       }},
      {"gt_scalar",
       [](const Row& row) {
         at::native::structured_gt_Scalar_out op;
         at::Tensor self, out;
         c10::Scalar other{2.0};
         check_structured(row, "gt", [&](const at::Tensor& o) { op.impl(self, other, o); }, &op, self, &other,
                          {&self, &other, &out});
       }},
      {"ge_scalar",
       [](const Row& row) {
         at::native::structured_ge_Scalar_out op;
         at::Tensor self, out;
         c10::Scalar other{2.0};
         check_structured(row, "ge", [&](const at::Tensor& o) { op.impl(self, other, o); }, &op, self, &other,
                          {&self, &other, &out});
       }},
      {"bitwise_or",
       [](const Row& row) {
         at::native::structured_bitwise_or_out op;
         at::Tensor self, other, out;
         check_structured(row, "bitwise_or", [&](const at::Tensor& o) { op.impl(self, other, o); }, &op, self, &other,
                          {&self, &other, &out});
       }},
      {"any_all",
       [](const Row& row) {
         at::native::structured_any_all_out op;
         at::Tensor self, out;
         check_structured(row, "any", [&](const at::Tensor& o) { op.impl(self, o); }, &op, self, nullptr, {&self, &out});
       }},
      {"gloo_allreduce",
       [](const Row&) {
         c10d::ProcessGroupGloo group;
         std::vector<at::Tensor> tensors(3);
         c10d::AllreduceOptions options{0};
         Calls calls(FSDPSKIP_RUN);
         c10::intrusive_ptr<c10d::Work> work = group.allreduce(tensors, options);
         EXPECT_EQ(work.target, shape_original_work()) << "the result did not come back";
         calls.original("ProcessGroupGloo::allreduce", &group, {&tensors, &options});
         calls.plugin({{"collective_started", -1, {&tensors}, 0}});
       }},
      {"gloo_reduce_scatter",
       [](const Row&) {
         c10d::ProcessGroupGloo group;
         std::vector<at::Tensor> outputs(2);
         std::vector<std::vector<at::Tensor>> inputs(2);
         c10d::ReduceScatterOptions options{0};
         Calls calls(FSDPSKIP_RUN);
         c10::intrusive_ptr<c10d::Work> work = group.reduce_scatter(outputs, inputs, options);
         EXPECT_EQ(work.target, shape_original_work()) << "the result did not come back";
         calls.original("ProcessGroupGloo::reduce_scatter", &group, {&outputs, &inputs, &options});
         calls.plugin({{"collective_started", -1, {&outputs}, 0}});
       }},
      {"nccl_all_reduce",
       [](const Row&) {
         float send[kCount], receive[kCount];
         int comm, stream;
         Calls calls(FSDPSKIP_RUN);
         EXPECT_EQ(ncclAllReduce(send, receive, kCount, kFloat32, 2, &comm, &stream), kShapeOriginalResult);
         calls.original("ncclAllReduce", send, {receive, &comm, &stream}, {}, {kCount, kFloat32, 2});
         calls.plugin({{"collective_started", -1, {nullptr}, sizeof receive}});
       }},
      {"nccl_reduce_scatter",
       [](const Row&) {
         float send[2 * kCount], receive[kCount];
         int comm, stream;
         Calls calls(FSDPSKIP_RUN);
         EXPECT_EQ(ncclReduceScatter(send, receive, kCount, kFloat32, 2, &comm, &stream), kShapeOriginalResult);
         calls.original("ncclReduceScatter", send, {receive, &comm, &stream}, {}, {kCount, kFloat32, 2});
         calls.plugin({{"collective_started", -1, {nullptr}, sizeof receive}});
       }},
      {"nccl_bcast",
       [](const Row&) {
         for (int rank : {0, 1}) {  // the root is 1: a receive, then a send
           float buffer[kCount];
           int comm = rank, stream;
           Calls calls(FSDPSKIP_RUN);
           EXPECT_EQ(ncclBcast(buffer, kCount, kFloat32, 1, &comm, &stream), kShapeOriginalResult);
           calls.original("ncclBcast", buffer, {&comm, &stream}, {}, {kCount, kFloat32, 1});
           calls.plugin({{"ncclBcast", FSDPSKIP_TRANSFER_BROADCAST, {buffer, buffer}, sizeof buffer, {1, static_cast<double>(rank)}}});
         }
       }},
      {"nccl_broadcast_c",
       [](const Row&) {
         for (int rank : {0, 1}) {
           float send[kCount], receive[kCount];
           int comm = rank, stream;
           Calls calls(FSDPSKIP_RUN);
           EXPECT_EQ(ncclBroadcast(send, receive, kCount, kFloat32, 1, &comm, &stream), kShapeOriginalResult);
           calls.original("ncclBroadcast", send, {receive, &comm, &stream}, {}, {kCount, kFloat32, 1});
           calls.plugin({{"ncclBroadcast", FSDPSKIP_TRANSFER_BROADCAST, {send, receive}, sizeof receive, {1, static_cast<double>(rank)}}});
         }
       }},
      {"nccl_recv",
       [](const Row&) {
         float buffer[kCount];
         int comm = 0, stream;
         Calls calls(FSDPSKIP_RUN);
         EXPECT_EQ(ncclRecv(buffer, kCount, kFloat32, 1, &comm, &stream), kShapeOriginalResult);
         calls.original("ncclRecv", buffer, {&comm, &stream}, {}, {kCount, kFloat32, 1});
         calls.plugin({{"ncclRecv", FSDPSKIP_TRANSFER_RECEIVE, {nullptr, buffer}, sizeof buffer, {-1, -1}}});
       }},
  };
  return table;
}

std::string file_of(const void* address) {
  Dl_info info;
  return dladdr(address, &info) && info.dli_fname ? info.dli_fname : "";
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The premises: every row is a call of the table's symbol, and the preload takes it.
TEST(ForwarderShapes, TheStandInsDefineEveryRowUnderItsMangledName) {
  void* originals = dlopen(FSDPSKIP_SHAPE_ORIGINALS, RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(originals, nullptr) << "the stand-in libtorch_cpu.so is not loaded";
  for (const Row& row : kRows) {
    void* address = dlsym(originals, row.mangled);
    EXPECT_NE(address, nullptr) << row.id << ": shape_signatures.h does not declare " << row.mangled;
    EXPECT_EQ(file_of(address), FSDPSKIP_SHAPE_ORIGINALS) << row.id;
    EXPECT_EQ(checks().count(row.id), 1u) << row.id << " has no check here";
  }
  EXPECT_EQ(checks().size(), sizeof kRows / sizeof kRows[0]) << "a check names no row";
  dlclose(originals);
}

TEST(ForwarderShapes, ThePreloadTakesEveryRowsCalls) {
  for (const Row& row : kRows)
    EXPECT_EQ(base_name(file_of(dlsym(RTLD_DEFAULT, row.mangled))), "libfsdpskip.so")
        << row.id << ": run with LD_PRELOAD=libfsdpskip.so";
}

TEST(ForwarderShapes, ThePluginIsLoadedExactlyInTheActiveRun) {
  StandInPlugin* plugin = plugin_state();
  if (active_run()) {
    ASSERT_NE(plugin, nullptr) << "the stand-in plugin was not loaded";
    EXPECT_TRUE(plugin->loaded);
  } else {
    EXPECT_EQ(plugin, nullptr);
  }
}

// An active process loads its plugin at its first interposed call: make
// one before any check, so that every check sees the plugin's side.
class LoadThePlugin : public testing::Environment {
  void SetUp() override {
    at::Tensor self;
    at::native::zero_(self);
  }
};
testing::Environment* const kLoadThePlugin = testing::AddGlobalTestEnvironment(new LoadThePlugin);

class ForwarderShape : public testing::TestWithParam<Row> {};

TEST_P(ForwarderShape, ArgumentsAndResultPassUnchanged) {
  auto check = checks().find(GetParam().id);
  ASSERT_NE(check, checks().end());
  check->second(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Rows, ForwarderShape, testing::ValuesIn(kRows),
                         [](const testing::TestParamInfo<Row>& info) { return std::string(info.param.id); });

}  // namespace
