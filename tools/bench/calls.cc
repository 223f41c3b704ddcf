// Per-call cost of each interposed function on a 16-element tensor. One
// binary, run by tools/bench/run under four conditions set by the
// environment: no preload; preload, inactive; active, untagged tensor;
// active, tagged tensor (FSDPSKIP_BENCH_TAGGED=1: the tensor is a parameter,
// so on an active rank its inits are skipped).
#include <benchmark/benchmark.h>
#include <torch/types.h>  // not torch/torch.h, which doubles the compile time

#include <cstdlib>

namespace {

at::Tensor tiny() {
  at::Tensor t = torch::empty({16});
  if (std::getenv("FSDPSKIP_BENCH_TAGGED")) t.set_requires_grad(true);
  return t;
}

template <typename Call>
void loop(benchmark::State& state, Call call) {
  at::Tensor t = tiny();
  at::Tensor source = torch::ones({16});
  at::NoGradGuard no_grad;
  for (auto _ : state) call(t, source);
}

void normal(benchmark::State& s) { loop(s, [](at::Tensor& t, const at::Tensor&) { t.normal_(); }); }
void uniform(benchmark::State& s) { loop(s, [](at::Tensor& t, const at::Tensor&) { t.uniform_(); }); }
void zero(benchmark::State& s) { loop(s, [](at::Tensor& t, const at::Tensor&) { t.zero_(); }); }
void fill(benchmark::State& s) { loop(s, [](at::Tensor& t, const at::Tensor&) { t.fill_(1.0); }); }
void copy(benchmark::State& s) { loop(s, [](at::Tensor& t, const at::Tensor& src) { t.copy_(src); }); }
void compare(benchmark::State& s) {
  at::Tensor out = torch::empty({16}, torch::kBool);
  loop(s, [&out](at::Tensor& t, const at::Tensor&) { at::lt_out(out, t, 0.5); });
}
void set_requires_grad(benchmark::State& state) {
  at::Tensor t = torch::empty({16});
  for (auto _ : state) t.set_requires_grad(true);
}

}  // namespace

BENCHMARK(normal);
BENCHMARK(uniform);
BENCHMARK(zero);
BENCHMARK(fill);
BENCHMARK(copy);
BENCHMARK(compare);
BENCHMARK(set_requires_grad);
BENCHMARK_MAIN();
