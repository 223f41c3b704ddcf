// What a skipped normal_ costs its generator: the advance by the draws the
// kernel would have made (random_draws.h), beside the kernel itself on a
// fresh parameter (its pages first touched, as an unpatched init's are).
// One thread; prints one JSON object per line, medians of 5 (tools/bench/run).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/types.h>  // not torch/torch.h, which doubles the compile time

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "random_draws.h"

namespace {

template <typename Body>
double median_seconds(Body body) {
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) {
    auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[2];
}

}  // namespace

int main() {
  at::set_num_threads(1);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1);
  for (c10::ScalarType dtype : {at::kFloat, at::kDouble})
    for (int64_t elements : {int64_t{1} << 20, int64_t{1} << 24}) {
      double kernel = median_seconds([&] { torch::empty({elements}, dtype).normal_(0.0, 0.02, generator); });
      uint64_t draws = *fsdpskip::random_draws(FSDPSKIP_NORMAL, torch::empty({elements}, dtype));
      double advance = median_seconds([&] { fsdpskip::advance(generator, draws); });
      printf("{\"dtype\": \"%s\", \"elements\": %lld, \"draws\": %llu, \"kernel_s\": %.6f, \"advance_s\": %.6f}\n",
             c10::toString(dtype), static_cast<long long>(elements), static_cast<unsigned long long>(draws), kernel,
             advance);
    }
}
