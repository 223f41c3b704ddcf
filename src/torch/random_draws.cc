#include "random_draws.h"

#include "mt19937_jump.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/ops/empty.h>
#include <pthread.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace fsdpskip {
namespace {

// The counts read off torch's sources. Half and bfloat16 normal_ changed
// between 2.6 and 2.14: it fills blocks of 16 in float, so the elements past
// the last whole block are drawn once, in the recomputed last 16, not twice.
enum class Rule { kUniform, kNormalEveryValue, kNormalWholeBlocks };

uint64_t count(Rule rule, uint64_t values) {
  uint64_t tail = values % 16 != 0 ? 16 : 0;
  switch (rule) {
    case Rule::kUniform: return values;
    case Rule::kNormalEveryValue: return values + tail;
    case Rule::kNormalWholeBlocks: return values - values % 16 + tail;
  }
  return 0;
}

// The dtypes a kernel draws for; a complex tensor draws as its real view.
constexpr c10::ScalarType kDrawn[] = {c10::kFloat, c10::kDouble, c10::kHalf, c10::kBFloat16};
constexpr int kDrawnCount = sizeof kDrawn / sizeof kDrawn[0];

int drawn_index(c10::ScalarType real) {
  for (int i = 0; i < kDrawnCount; ++i)
    if (kDrawn[i] == real) return i;
  return -1;
}

// Set while this thread probes the running torch's kernels: their calls run.
thread_local bool t_probing = false;

// Which rule the running torch follows, per kernel and dtype, found once by
// running its kernels on a few sizes on a scratch generator and comparing
// with each rule's advance; none where no rule matches every size (a torch
// whose kernels changed again), or where the kernel refused: such calls are
// not skipped.
struct Rules {
  std::optional<Rule> normal[kDrawnCount], uniform[kDrawnCount];
};

bool matches(fsdpskip_kernel kernel, c10::ScalarType dtype, Rule rule) {
  try {
    for (int64_t size : {16, 17, 31, 33, 100, 1000}) {
      at::Generator ran = at::make_generator<at::CPUGeneratorImpl>(20261201);
      at::Generator advanced = at::make_generator<at::CPUGeneratorImpl>(20261201);
      at::Tensor t = at::empty({size}, at::TensorOptions().dtype(dtype));
      if (kernel == FSDPSKIP_NORMAL) t.normal_(0.0, 1.0, ran);
      else t.uniform_(0.0, 1.0, ran);
      advance(advanced, count(rule, size) * (dtype == c10::kDouble ? 2 : 1));
      if (!ran.get_state().equal(advanced.get_state())) return false;
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The probe runs once, on the first thread that counts; another thread
// counting meanwhile waits for it (a few milliseconds, holding none of our
// locks), so that every thread skips alike. Not a function-local static: a
// child forked during the probe would wait on its guard forever; here the
// child starts over.
enum ProbeState { kUnprobed, kProbing, kProbed };
std::atomic<int> g_probe_state{kUnprobed};
Rules g_rules;
// Registered when the plugin loads, before any probe can start.
[[maybe_unused]] const int g_probe_reset_in_child = pthread_atfork(nullptr, nullptr, [] {
  int probing = kProbing;
  g_probe_state.compare_exchange_strong(probing, kUnprobed);
});

const Rules& rules() {
  int state = g_probe_state.load(std::memory_order_acquire);
  for (;;) {
    if (state == kProbed) return g_rules;
    if (state == kProbing) {
      std::this_thread::yield();
      state = g_probe_state.load(std::memory_order_acquire);
    } else if (g_probe_state.compare_exchange_weak(state, kProbing, std::memory_order_acquire)) {
      break;
    }
  }
  struct Probing {  // whatever escapes, the waiting threads go on (and one probes again)
    Probing() { t_probing = true; }
    ~Probing() {
      t_probing = false;
      int unfinished = kProbing;
      g_probe_state.compare_exchange_strong(unfinished, kUnprobed, std::memory_order_release);
    }
  } probing;
  for (int i = 0; i < kDrawnCount; ++i) {
    if (matches(FSDPSKIP_UNIFORM, kDrawn[i], Rule::kUniform)) g_rules.uniform[i] = Rule::kUniform;
    for (Rule rule : {Rule::kNormalEveryValue, Rule::kNormalWholeBlocks})
      if (!g_rules.normal[i] && matches(FSDPSKIP_NORMAL, kDrawn[i], rule)) g_rules.normal[i] = rule;
  }
  g_probe_state.store(kProbed, std::memory_order_release);
  return g_rules;
}

}  // namespace

bool probing_random_kernels() { return t_probing; }

std::optional<uint64_t> random_draws(fsdpskip_kernel kernel, const at::Tensor& self) {
  if (!self.device().is_cpu() || self.layout() != c10::kStrided) return std::nullopt;
  c10::ScalarType type = self.scalar_type();
  bool complex = c10::isComplexType(type);
  int drawn = drawn_index(complex ? c10::toRealValueType(type) : type);
  if (drawn < 0 || (kernel != FSDPSKIP_NORMAL && kernel != FSDPSKIP_UNIFORM))
    return std::nullopt;  // torch raises for these, or draws through a path not read here
  uint64_t values = static_cast<uint64_t>(self.numel()) * (complex ? 2 : 1);
  if (kernel == FSDPSKIP_NORMAL && (values < 16 || !self.is_contiguous())) return std::nullopt;  // Box-Muller
  if (t_probing) return std::nullopt;  // the probe's own calls run
  const Rules& found = rules();
  const std::optional<Rule>& rule = kernel == FSDPSKIP_NORMAL ? found.normal[drawn] : found.uniform[drawn];
  if (!rule) return std::nullopt;
  return count(*rule, values) * (kDrawn[drawn] == c10::kDouble ? 2 : 1);
}

// The engine's operator() decrements left_ and regenerates when it reaches
// 0 (then left_ = 624, next_ = 0), and reads state_[next_++]: from (left,
// next), left - 1 outputs come before the next regeneration.
uint64_t move_place(at::mt19937_data_pod& state, uint64_t draws) {
  uint64_t before_regeneration = static_cast<uint64_t>(state.left_) - 1;
  if (draws <= before_regeneration) {
    state.left_ -= static_cast<int>(draws);
    state.next_ += static_cast<uint32_t>(draws);
    return 0;
  }
  uint64_t after_first = draws - before_regeneration - 1;  // outputs after the first regeneration's first one
  uint64_t read = 1 + after_first % kMtWords;           // of the last regeneration's words
  state.left_ = kMtWords + 1 - static_cast<int>(read);
  state.next_ = static_cast<uint32_t>(read);
  return 1 + after_first / kMtWords;
}

void discard_draws(at::mt19937_data_pod& state, uint64_t draws) {
  regenerate_times(state.state_.data(), move_place(state, draws));
}

bool freshly_seeded(const at::Generator& generator) {
  auto* cpu = at::check_generator<at::CPUGeneratorImpl>(generator);
  std::lock_guard<std::mutex> lock(cpu->mutex_);
  at::mt19937_data_pod state = cpu->engine().data();
  return state.left_ == 1 && state.next_ == 0;
}

at::Generator cpu_generator(const compat::GeneratorArgument& argument) {
  at::get_generator_or_default<at::CPUGeneratorImpl>(argument, at::detail::getDefaultCPUGenerator());  // its checks
  return argument.has_value() && argument->defined() ? *argument : at::detail::getDefaultCPUGenerator();
}

void set_engine_state(at::CPUGeneratorImpl* cpu, const at::mt19937_data_pod& state) {
  at::mt19937 engine = cpu->engine();
  engine.set_data(state);
  cpu->set_engine(engine);
}

void advance(const at::Generator& generator, uint64_t draws) {
  auto* cpu = at::check_generator<at::CPUGeneratorImpl>(generator);
  std::lock_guard<std::mutex> lock(cpu->mutex_);
  at::mt19937_data_pod state = cpu->engine().data();
  discard_draws(state, draws);
  set_engine_state(cpu, state);
}

}  // namespace fsdpskip
