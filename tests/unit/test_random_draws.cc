// random_draws.h against torch's own CPU kernels and MT19937 engine: the
// generator a skipped call leaves must be bitwise the one the kernel leaves.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <string>
#include <vector>

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
    at::Tensor param = torch::empty({300, 17});
    ASSERT_TRUE(Tracker::instance().tag(compat::storage_of(param.unsafeGetTensorImpl())));
    ASSERT_EQ(Tracker::instance().decide_init(FSDPSKIP_NORMAL, param, &argument), FSDPSKIP_SKIP);
    Tracker::instance().skipped(FSDPSKIP_NORMAL, param, &argument);
    at::Tensor ran = torch::empty({300, 17});
    ran.normal_(0.0, 1.0, reference);
    EXPECT_EQ(state_bytes(used), state_bytes(reference)) << (passed ? "passed" : "default");
    EXPECT_EQ(param.abs().sum().item<double>(), 0.0) << "skipped memory reads as zeros";
  }
}

}  // namespace
}  // namespace fsdpskip
