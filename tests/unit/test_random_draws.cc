// random_draws.h against torch's own CPU kernels and MT19937 engine: the
// generator a skipped call leaves must be bitwise the one the kernel leaves.
#include <gtest/gtest.h>
#include <torch/types.h>  // not torch/torch.h, which doubles the compile time
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <string>
#include <vector>

#include "mt19937_jump.h"
#include "random_draws.h"
#include "tracker.h"

namespace fsdpskip {
namespace {

bool same_state(const at::mt19937_data_pod& a, const at::mt19937_data_pod& b) {
  return a.seed_ == b.seed_ && a.left_ == b.left_ && a.seeded_ == b.seeded_ && a.next_ == b.next_ &&
         a.state_ == b.state_;
}

// The bytes torch.get_rng_state() gives: the engine and the cached normal samples.
std::vector<uint8_t> state_bytes(const at::Generator& generator) {
  at::Tensor state = generator.get_state();
  return std::vector<uint8_t>(state.data_ptr<uint8_t>(), state.data_ptr<uint8_t>() + state.numel());
}

// torch.get_rng_state() as the preload serves it: the generator pays what it
// owes first (CPUGeneratorImpl::get_state's interposer, under its lock).
std::vector<uint8_t> read_state(at::Generator generator) {
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    Tracker::instance().generator_touched(generator.unsafeGetGeneratorImpl(), true);
  }
  return state_bytes(generator);
}

uint64_t owed(const at::Generator& generator) {
  return Tracker::instance().owed_regenerations(generator.unsafeGetGeneratorImpl());
}

TEST(RandomDraws, DiscardingLeavesTheEngineWhereItsCallsDo) {
  for (uint64_t before : {0u, 1u, 100u, 623u, 624u, 625u}) {
    for (uint64_t draws : {0u, 1u, 2u, 622u, 623u, 624u, 625u, 1247u, 1248u, 1249u, 5000u, 100003u}) {
      at::mt19937 called(1234), discarded;
      for (uint64_t i = 0; i < before; ++i) called();
      discarded = called;
      for (uint64_t i = 0; i < draws; ++i) called();
      at::mt19937_data_pod state = discarded.data();
      discard_draws(state, draws);
      discarded.set_data(state);
      ASSERT_TRUE(same_state(called.data(), discarded.data())) << before << " then " << draws;
      for (int i = 0; i < 3; ++i) ASSERT_EQ(called(), discarded()) << before << " then " << draws;
    }
  }
}

// The jump table (tools/mt19937-jumps), row by row: its first row against
// that many regenerations made one by one, each later row against the row
// before it made twice.
TEST(RandomDraws, EachJumpMovesTheStateAsItsRegenerationsDo) {
  at::mt19937 engine(20261203);
  at::mt19937_data_pod start = engine.data();
  std::vector<uint32_t> jumped(start.state_.begin(), start.state_.end()), stepped = jumped;
  jump(jumped.data(), first_jump_exponent());
  for (int i = 0; i < 1 << first_jump_exponent(); ++i) regenerate(stepped.data());
  ASSERT_EQ(jumped, stepped) << "row " << first_jump_exponent();
  for (int exponent = first_jump_exponent() + 1; exponent <= last_jump_exponent(); ++exponent) {
    std::vector<uint32_t> once(start.state_.begin(), start.state_.end()), twice = once;
    jump(once.data(), exponent);
    jump(twice.data(), exponent - 1);
    jump(twice.data(), exponent - 1);
    ASSERT_EQ(once, twice) << "row " << exponent;
  }
}

// Counts past the first jump mix jumps with single regenerations.
TEST(RandomDraws, DiscardingPastAJumpLeavesTheEngineWhereItsCallsDo) {
  uint64_t first = uint64_t{1} << first_jump_exponent();
  for (uint64_t draws : {first * 624 - 1, first * 624 + 5, (3 * first + 7) * 624 + 300}) {
    at::mt19937 called(77), discarded;
    for (int i = 0; i < 5; ++i) called();
    discarded = called;
    for (uint64_t i = 0; i < draws; ++i) called();
    at::mt19937_data_pod state = discarded.data();
    discard_draws(state, draws);
    discarded.set_data(state);
    ASSERT_TRUE(same_state(called.data(), discarded.data())) << draws;
    for (int i = 0; i < 3; ++i) ASSERT_EQ(called(), discarded()) << draws;
  }
}

struct Case {
  const char* kernel;
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  bool transposed;
};

std::string name(const Case& c) {
  std::string text = std::string(c.kernel) + " " + c10::toString(c.dtype) + " [";
  for (int64_t size : c.sizes) text += std::to_string(size) + ",";
  return text + "]" + (c.transposed ? " transposed" : "");
}

// Every dtype, contiguity and size class torch's CPU kernels tell apart.
std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* kernel : {"normal_", "uniform_"})
    for (c10::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kComplexFloat})
      for (std::vector<int64_t> sizes : std::vector<std::vector<int64_t>>{
               {1}, {7}, {15}, {16}, {17}, {8, 2}, {33, 3}, {64, 64}, {1000, 7}, {4097}})
        for (bool transposed : {false, true})
          if (!transposed || sizes.size() == 2) all.push_back({kernel, dtype, sizes, transposed});
  return all;
}

at::Tensor made(const Case& c) {
  at::Tensor t = torch::empty(c.sizes, at::TensorOptions().dtype(c.dtype));
  return c.transposed ? t.t() : t;
}

void run_kernel(const Case& c, at::Tensor& t, const compat::GeneratorArgument& generator) {
  if (std::string(c.kernel) == "normal_") t.normal_(0.0, 0.02, generator);
  else t.uniform_(-0.1, 0.1, generator);
}

fsdpskip_kernel kernel_of(const Case& c) {
  return std::string(c.kernel) == "normal_" ? FSDPSKIP_NORMAL : FSDPSKIP_UNIFORM;
}

TEST(RandomDraws, AnAdvanceLeavesTheGeneratorWhereTorchsKernelDoes) {
  int counted = 0;
  for (const Case& c : cases()) {
    at::Tensor t = made(c);
    std::optional<uint64_t> draws = random_draws(kernel_of(c), t);
    if (!draws) continue;
    ++counted;
    at::Generator ran = at::make_generator<at::CPUGeneratorImpl>(77), advanced = at::make_generator<at::CPUGeneratorImpl>(77);
    // A cached normal sample, as a scalar normal_ before leaves one: kept as it is.
    at::Tensor one = torch::empty({1});
    for (const at::Generator& g : {ran, advanced}) one.normal_(0.0, 1.0, g);
    run_kernel(c, t, ran);
    advance(advanced, *draws);
    EXPECT_EQ(state_bytes(ran), state_bytes(advanced)) << name(c) << ": " << *draws << " draws";
  }
  EXPECT_GT(counted, 50);
}

TEST(RandomDraws, OnlyTheScalarBoxMullerPathAndOtherDevicesAreUncounted) {
  for (const Case& c : cases()) {
    bool normal = kernel_of(c) == FSDPSKIP_NORMAL;
    at::Tensor t = made(c);
    int64_t values = t.numel() * (t.is_complex() ? 2 : 1);
    bool scalar_path = normal && (values < 16 || !t.is_contiguous());
    EXPECT_EQ(random_draws(kernel_of(c), t).has_value(), !scalar_path) << name(c);
  }
  EXPECT_FALSE(random_draws(FSDPSKIP_UNIFORM, torch::empty({64}, at::kLong)).has_value());
  EXPECT_FALSE(random_draws(FSDPSKIP_NORMAL, torch::empty({64}, at::TensorOptions().device(at::kMeta))).has_value());
}

TEST(RandomDraws, TheGeneratorArgumentOrTheDefaultOne) {
  compat::GeneratorArgument none;
  EXPECT_EQ(cpu_generator(none).unsafeGetGeneratorImpl(), at::detail::getDefaultCPUGenerator().unsafeGetGeneratorImpl());
  at::Generator own = at::make_generator<at::CPUGeneratorImpl>(5);
  compat::GeneratorArgument passed{own};
  EXPECT_EQ(cpu_generator(passed).unsafeGetGeneratorImpl(), own.unsafeGetGeneratorImpl());
}

// Through the tracker, as the plugin calls it: a skipped init of a tagged
// parameter leaves its generator (passed, or the default) as the kernel would.
TEST(RandomDraws, ASkippedInitAdvancesItsGenerator) {
  Tracker::instance().start(nullptr);
  Tracker::instance().set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, false);
  for (bool passed : {true, false}) {
    at::Generator own = at::make_generator<at::CPUGeneratorImpl>(9);
    at::Generator used = passed ? own : at::detail::getDefaultCPUGenerator();
    compat::GeneratorArgument argument = passed ? compat::GeneratorArgument(own) : compat::GeneratorArgument();
    at::Generator reference = at::make_generator<at::CPUGeneratorImpl>();
    reference.set_state(used.get_state());
    at::Tensor param = torch::empty({300, 68});  // 80 KiB: pages of its own (OwnedPages)
    ASSERT_TRUE(Tracker::instance().tag(compat::storage_of(param.unsafeGetTensorImpl())));
    ASSERT_EQ(Tracker::instance().decide_init(FSDPSKIP_NORMAL, param, &argument), FSDPSKIP_SKIP);
    fsdpskip_call_arguments arguments{0.0, 1.0, nullptr, false, {}};
    Tracker::instance().skipped(FSDPSKIP_NORMAL, param, &argument, &arguments);
    at::Tensor ran = torch::empty({300, 68});
    ran.normal_(0.0, 1.0, reference);
    EXPECT_EQ(owed(used), 33u) << "20416 draws from a fresh seed span 33 regenerations, owed until the state is read";
    EXPECT_EQ(read_state(used), state_bytes(reference)) << (passed ? "passed" : "default");
    EXPECT_EQ(owed(used), 0u);
    Tracker::instance().materialize(param, "a test");
    EXPECT_TRUE(param.equal(ran)) << "materialized, it holds the skipped draw's values";
  }
}

// What a generator owes for skipped calls is paid before anything it draws
// that fsdpskip sees (a normal_ that runs: decide_init), and is dropped by
// a reseed (set_current_seed's interposer). A draw fsdpskip does not see
// (randperm) takes its values from the earlier words, and the generator
// still ends where it would without fsdpskip.
TEST(RandomDraws, AGeneratorPaysWhatItOwesBeforeADrawAndNotAfterAReseed) {
  Tracker& tracker = Tracker::instance();
  tracker.start(nullptr);
  tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Generator reference = at::make_generator<at::CPUGeneratorImpl>(5);
  compat::GeneratorArgument argument(generator);
  auto skip_init = [&](int64_t rows) {
    at::Tensor param = torch::empty({rows, 1000});
    tracker.tag(compat::storage_of(param.unsafeGetTensorImpl()));
    ASSERT_EQ(tracker.decide_init(FSDPSKIP_NORMAL, param, &argument), FSDPSKIP_SKIP);
    fsdpskip_call_arguments arguments{0.0, 1.0, nullptr, false, {}};
    tracker.skipped(FSDPSKIP_NORMAL, param, &argument, &arguments);
    torch::empty({rows, 1000}).normal_(0.0, 1.0, reference);
  };
  skip_init(3000);
  skip_init(2000);
  EXPECT_EQ(owed(generator), 8013u) << "5M draws: 8013 regenerations owed";
  at::Tensor drawn = torch::empty({64}), expected = torch::empty({64});
  ASSERT_EQ(tracker.decide_init(FSDPSKIP_UNIFORM, drawn, &argument), FSDPSKIP_RUN);
  EXPECT_EQ(owed(generator), 0u) << "paid before the kernel draws";
  drawn.uniform_(0.0, 1.0, generator);
  expected.uniform_(0.0, 1.0, reference);
  EXPECT_TRUE(drawn.equal(expected)) << "a draw after a skip is the draw without fsdpskip";

  skip_init(700);
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    tracker.generator_touched(generator.unsafeGetGeneratorImpl(), false);
    generator.set_current_seed(5);
  }
  EXPECT_EQ(owed(generator), 0u) << "a reseed drops the debt";
  EXPECT_EQ(read_state(generator), state_bytes(at::make_generator<at::CPUGeneratorImpl>(5)));

  reference.set_current_seed(5);
  skip_init(700);
  at::randperm(1000, generator);
  at::randperm(1000, reference);
  EXPECT_EQ(read_state(generator), state_bytes(reference)) << "an unseen draw moves it by as much";
  tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);
}

// A source's replay (Tracker::sending): each skipped storage gets, bitwise,
// what its calls would have written, in their order: normal_ and uniform_
// from where their generator stood (with a draw fsdpskip did not skip in
// between, which starts a new snapshot), a zero_ of a row through a view,
// a fill_, and a conversion of a skipped storage (copy_). Replayed out of
// order (the later storage first) too. Then nothing is pending.
TEST(RandomDraws, ASourceReplaysItsSkippedCallsBitwise) {
  Tracker& tracker = Tracker::instance();
  tracker.start(nullptr);
  tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);
  for (bool in_order : {true, false}) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(20261202);
    at::Generator reference = at::make_generator<at::CPUGeneratorImpl>();
    reference.set_state(generator.get_state());
    compat::GeneratorArgument argument(generator);
    auto skip = [&](fsdpskip_kernel kernel, const at::Tensor& t, fsdpskip_call_arguments arguments) {
      tracker.tag(compat::storage_of(t.unsafeGetTensorImpl()));  // a view's storage is tagged already
      bool random = kernel == FSDPSKIP_NORMAL || kernel == FSDPSKIP_UNIFORM;
      ASSERT_EQ(tracker.decide_init(kernel, t, random ? &argument : nullptr), FSDPSKIP_SKIP);
      tracker.skipped(kernel, t, random ? &argument : nullptr, &arguments);
    };
    // What the calls write without fsdpskip, on the reference generator.
    // Each of at least 64 KiB: pages of its own (OwnedPages), as only those are skipped.
    at::Tensor first = torch::empty({300, 68}), next = torch::empty({400, 41}), second = torch::empty({17000});
    at::Tensor third = torch::empty({16384});
    at::Tensor expected_first = torch::empty({300, 68}), expected_next = torch::empty({400, 41});
    at::Tensor expected_second = torch::empty({17000});
    expected_first.normal_(0.5, 2.0, reference);
    expected_first[3].zero_();
    expected_next.normal_(0.0, 0.02, reference);  // the same run of draws as first's: its offset is past first's
    torch::empty({5}).normal_(0.0, 1.0, reference);  // Box-Muller, not skipped: it runs between
    expected_second.uniform_(-1.0, 1.0, reference);
    at::Tensor expected_third = torch::full({16384}, 0.25);

    skip(FSDPSKIP_NORMAL, first, {0.5, 2.0, nullptr, false, {}});
    at::Tensor row = first[3];
    skip(FSDPSKIP_ZERO, row, {0, 0, nullptr, false, {}});
    skip(FSDPSKIP_NORMAL, next, {0.0, 0.02, nullptr, false, {}});
    at::Tensor small = torch::empty({5});  // as the interposer runs it: decided first
    ASSERT_EQ(tracker.decide_init(FSDPSKIP_NORMAL, small, &argument), FSDPSKIP_RUN);
    small.normal_(0.0, 1.0, generator);
    skip(FSDPSKIP_UNIFORM, second, {-1.0, 1.0, nullptr, false, {}});
    c10::Scalar quarter(0.25);
    skip(FSDPSKIP_FILL, third, {0, 0, &quarter, true, {}});
    // A conversion of a skipped storage stays skipped: its replay converts the replayed source.
    at::Tensor converted = torch::empty({300, 68}, at::kDouble);
    ASSERT_EQ(tracker.decide_copy(converted, first), FSDPSKIP_SKIP);
    fsdpskip_call_arguments copy_arguments{0, 0, &first, false, {}};
    tracker.skipped(FSDPSKIP_COPY, converted, nullptr, &copy_arguments);
    EXPECT_EQ(read_state(generator), state_bytes(reference)) << "skipped calls advance it as the kernels would";

    std::vector<at::Tensor> sent = in_order ? std::vector<at::Tensor>{first, next, second, third, converted}
                                            : std::vector<at::Tensor>{next, converted, third, second, first};
    EXPECT_TRUE(tracker.sending(sent).empty());
    EXPECT_TRUE(first.equal(expected_first)) << (in_order ? "in order" : "out of order");
    EXPECT_TRUE(next.equal(expected_next));
    EXPECT_TRUE(second.equal(expected_second));
    EXPECT_TRUE(third.equal(expected_third));
    EXPECT_TRUE(converted.equal(expected_first.to(at::kDouble)));
    for (const at::Tensor& t : sent) EXPECT_FALSE(tracker.is_pending(compat::storage_of(t.unsafeGetTensorImpl())));
    tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);  // a new loading phase
  }
  // The bookkeeping per skipped call (docs/limits.md): a model of 10,000
  // parameter tensors keeps a few MB of it.
  EXPECT_LE(kSkippedCallBytes, 256u);
}

// trunc_normal_ up to torch 2.11: uniform_, then in place erfinv_, mul_
// (by a Python number: a wrapped 0-dim double), add_ and clamp_. Each step
// is skipped and joins the recipe, in half and float; materialized, the
// storage holds bitwise what the chain gives without fsdpskip. A step
// whose kernel refuses the dtype when it runs (erfinv_ on half in torch
// 1.13) is not skipped: it runs, and raises what it raises.
TEST(RandomDraws, AChainOfStepsJoinsTheRecipe) {
  Tracker& tracker = Tracker::instance();
  tracker.start(nullptr);
  tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);
  {
    at::Tensor half = torch::empty({300, 68}, at::kHalf);
    tracker.tag(compat::storage_of(half.unsafeGetTensorImpl()));
    fsdpskip_call_arguments none{0, 0, nullptr, false, {}};
    ASSERT_TRUE(tracker.skipped(FSDPSKIP_ZERO, half, nullptr, &none));
    bool raises = false;
    try {
      torch::empty({1}, at::kHalf).erfinv_();
    } catch (const c10::Error&) {
      raises = true;
    }
    fsdpskip_call_arguments erfinv{0, 0, nullptr, false, {&half}};
    EXPECT_EQ(tracker.decide_chain(FSDPSKIP_ERFINV, half, half, erfinv), raises ? FSDPSKIP_RUN : FSDPSKIP_SKIP);
  }
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(11);
    at::Generator reference = at::make_generator<at::CPUGeneratorImpl>(11);
    compat::GeneratorArgument argument(generator);
    at::Tensor param = torch::empty({300, 68}, dtype), expected = torch::empty({300, 68}, dtype);
    at::Tensor factor = at::scalar_tensor(0.02 * std::sqrt(2.0), at::kDouble);
    factor.unsafeGetTensorImpl()->set_wrapped_number(true);
    at::Tensor shift = at::scalar_tensor(0.5, at::kDouble);  // a 0-dim tensor, not a Python number
    c10::Scalar one(1), low(-0.04), high(0.04);
    expected.uniform_(-0.9, 0.9, reference).erfinv_();
    at::mul_out(expected, factor, expected).add_(shift, one).clamp_(low, high);

    tracker.tag(compat::storage_of(param.unsafeGetTensorImpl()));
    ASSERT_EQ(tracker.decide_init(FSDPSKIP_UNIFORM, param, &argument), FSDPSKIP_SKIP);
    fsdpskip_call_arguments drawn{-0.9, 0.9, nullptr, false, {}};
    ASSERT_TRUE(tracker.skipped(FSDPSKIP_UNIFORM, param, &argument, &drawn));
    struct Step {
      fsdpskip_kernel kernel;
      fsdpskip_call_arguments arguments;
    };
    // mul_ as torch 1.13's mul_(Scalar) calls it: mul_out(param, factor, param).
    for (const Step& step : {Step{FSDPSKIP_ERFINV, {0, 0, nullptr, false, {&param}}},
                             Step{FSDPSKIP_MUL, {0, 0, nullptr, false, {&factor, &param}}},
                             Step{FSDPSKIP_ADD, {0, 0, nullptr, false, {&param, &shift, &one}}},
                             Step{FSDPSKIP_CLAMP, {0, 0, nullptr, false, {&param, &low, &high}}}}) {
      ASSERT_EQ(tracker.decide_chain(step.kernel, param, param, step.arguments), FSDPSKIP_SKIP) << kernel_name(step.kernel);
      ASSERT_TRUE(tracker.skipped(step.kernel, param, nullptr, &step.arguments));
    }
    shift.fill_(7.0);  // the caller's operand changes later: the recipe kept its own
    EXPECT_TRUE(tracker.is_pending(compat::storage_of(param.unsafeGetTensorImpl())));
    tracker.materialize(param, "a test");
    EXPECT_TRUE(param.equal(expected)) << "the chain replayed in order, bitwise (" << dtype << ")";
  }
}

// The generators that owe, as the preload's draw forwarder reads them: each
// keeps its own slot until its debt ends, whatever the others do (a draw
// reading the slots one by one never misses one that moved), and those
// beyond the slots make the last read ANY. The word after the slots names
// a generator that owes alone, so that draws from any other skip the slots.
TEST(RandomDraws, OwingGeneratorsKeepTheirSlots) {
  Tracker& tracker = Tracker::instance();
  tracker.start(nullptr);
  tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);
  void* const* slots = tracker.owing_generators();
  std::vector<at::Generator> generators;
  std::vector<at::Tensor> params;
  for (int i = 0; i < FSDPSKIP_OWING_SLOTS + 1; ++i) {
    if (i == 1) {
      EXPECT_EQ(slots[FSDPSKIP_OWING_SLOTS], generators[0].unsafeGetGeneratorImpl()) << "one owes alone";
    }
    generators.push_back(at::make_generator<at::CPUGeneratorImpl>(i + 1));
    compat::GeneratorArgument argument(generators.back());
    params.push_back(torch::empty({2000, 1000}));  // 2M draws: thousands of regenerations owed
    tracker.tag(compat::storage_of(params.back().unsafeGetTensorImpl()));
    ASSERT_EQ(tracker.decide_init(FSDPSKIP_NORMAL, params.back(), &argument), FSDPSKIP_SKIP);
    fsdpskip_call_arguments arguments{0.0, 1.0, nullptr, false, {}};
    ASSERT_TRUE(tracker.skipped(FSDPSKIP_NORMAL, params.back(), &argument, &arguments));
  }
  auto impl = [&](int i) -> void* { return generators[i].unsafeGetGeneratorImpl(); };
  for (int i = 0; i + 1 < FSDPSKIP_OWING_SLOTS; ++i) EXPECT_EQ(slots[i], impl(i)) << "slot " << i;
  EXPECT_EQ(slots[FSDPSKIP_OWING_SLOTS - 1], FSDPSKIP_OWING_ANY) << "two owe beyond the slots";
  EXPECT_EQ(slots[FSDPSKIP_OWING_SLOTS], FSDPSKIP_OWING_ANY) << "several owe: the slots say which";
  read_state(generators[1]);  // pays
  EXPECT_EQ(slots[0], impl(0)) << "the others stay where they were";
  EXPECT_EQ(slots[1], nullptr);
  EXPECT_EQ(slots[2], impl(2));
  read_state(generators[FSDPSKIP_OWING_SLOTS - 1]);
  EXPECT_EQ(slots[FSDPSKIP_OWING_SLOTS - 1], FSDPSKIP_OWING_ANY) << "one still owes beyond the slots";
  for (int i = 0; i + 1 < FSDPSKIP_OWING_SLOTS; ++i) read_state(generators[i]);
  EXPECT_EQ(slots[FSDPSKIP_OWING_SLOTS], FSDPSKIP_OWING_ANY) << "the one left owes beyond the slots";
  read_state(generators[FSDPSKIP_OWING_SLOTS]);
  for (int i = 0; i < FSDPSKIP_OWING_WORDS; ++i) EXPECT_EQ(slots[i], nullptr) << "word " << i;
  for (const at::Tensor& param : params) tracker.materialize(param, "a test");
}

// A chain step that cannot be replayed (its operand a tensor of many
// elements) or whose storage is not skipped is not skipped: the kernel runs. NCCL's C API sending a buffer over a
// skipped storage is named. In audit mode every init ran: what is sent is
// counted as materialized, nothing stops.
TEST(RandomDraws, WhatCannotBeReplayedIsNotSkippedAndNcclSendsAreNamed) {
  Tracker& tracker = Tracker::instance();
  tracker.start(nullptr);
  tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);
  at::Tensor chain = torch::empty({1 << 16}), many = torch::ones({1 << 16});
  ASSERT_TRUE(tracker.tag(compat::storage_of(chain.unsafeGetTensorImpl())));
  fsdpskip_call_arguments none{0, 0, nullptr, false, {}}, erfinv{0, 0, nullptr, false, {&chain}};
  fsdpskip_call_arguments by_many{0, 0, nullptr, false, {&chain, &many}};
  EXPECT_EQ(tracker.decide_chain(FSDPSKIP_ERFINV, chain, chain, erfinv), FSDPSKIP_RUN) << "not skipped: nothing to step";
  EXPECT_FALSE(tracker.skipped(FSDPSKIP_ERFINV, chain, nullptr, &erfinv));
  ASSERT_TRUE(tracker.skipped(FSDPSKIP_ZERO, chain, nullptr, &none));
  EXPECT_EQ(tracker.decide_chain(FSDPSKIP_MUL, chain, chain, by_many), FSDPSKIP_RUN);
  EXPECT_FALSE(tracker.is_pending(compat::storage_of(chain.unsafeGetTensorImpl()))) << "materialized before it runs";
  at::Tensor raw = torch::empty({1 << 16});
  ASSERT_TRUE(tracker.tag(compat::storage_of(raw.unsafeGetTensorImpl())));
  ASSERT_TRUE(tracker.skipped(FSDPSKIP_ZERO, raw, nullptr, &none));
  EXPECT_EQ(tracker.sending_raw(raw.data_ptr(), 16).size(), 1u) << "a buffer overlapping it";
  EXPECT_TRUE(tracker.is_pending(compat::storage_of(raw.unsafeGetTensorImpl())));

  tracker.set_policy(true, true, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);  // audit
  at::Tensor audited = torch::empty({1 << 16});
  ASSERT_TRUE(tracker.tag(compat::storage_of(audited.unsafeGetTensorImpl())));
  tracker.audited(FSDPSKIP_NORMAL, audited, 1);
  uint64_t replayed = tracker.stats()[Counter::storages_replayed];
  EXPECT_TRUE(tracker.sending({audited}).empty());
  EXPECT_EQ(tracker.stats()[Counter::storages_replayed], replayed + 1);
  tracker.set_policy(true, false, FSDPSKIP_LOG_QUIET, FSDPSKIP_STACKS_NATIVE, true);
}

}  // namespace
}  // namespace fsdpskip
