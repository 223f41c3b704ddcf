// Instructions, counted by callgrind (repeatable on a shared, noisy machine,
// where a few ns per call are noise): tools/bench/run runs this under
// `valgrind --tool=callgrind` with no preload, the preload inactive, and an
// active rank, and divides each counted function's inclusive count by its
// calls.
//
//   calls N      N calls of each interposed kernel on a 16-element tensor,
//                each kernel in a function of its own (counted_<kernel>)
//   training N   a loading as an active rank has it (parameters built, rank
//                0's values received through NCCL's C API, here the tests'
//                stand-in libnccl.so.2), then N training steps with
//                zero_grad(set_to_none=False) and the gradients all-reduced
//                (counted_training)
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
int ncclBcast(void* buff, size_t count, int datatype, int root, void* comm, void* stream);
int ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op, void* comm, void* stream);
void fake_nccl_stage(const void* data, size_t bytes);
}

namespace {

constexpr int kFloat32 = 7;  // ncclFloat32

#define COUNTED(name, body)                                                                         \
  extern "C" __attribute__((noinline)) void counted_##name(at::Tensor& t, const at::Tensor& other, \
                                                           at::Tensor& mask, int n) {               \
    for (int i = 0; i < n; ++i) body;                                                               \
    asm volatile("" ::: "memory");                                                                  \
  }
COUNTED(normal_, t.normal_())
COUNTED(uniform_, t.uniform_())
COUNTED(zero_, t.zero_())
COUNTED(fill_, t.fill_(1.0))
COUNTED(copy_, t.copy_(other))
COUNTED(lt, at::lt_out(mask, t, 0.5))

void calls(int n) {
  at::Tensor t = torch::empty({16}), other = torch::ones({16}), mask = torch::empty({16}, torch::kBool);
  torch::NoGradGuard no_grad;
  // Once each uncounted: the lookups, the plugin's loading on an active rank.
  t.normal_(), t.uniform_(), t.zero_(), t.fill_(1.0), t.copy_(other), at::lt_out(mask, t, 0.5);
  counted_normal_(t, other, mask, n);
  counted_uniform_(t, other, mask, n);
  counted_zero_(t, other, mask, n);
  counted_fill_(t, other, mask, n);
  counted_copy_(t, other, mask, n);
  counted_lt(t, other, mask, n);
}

struct Net : torch::nn::Module {
  Net() {
    for (int i = 0; i < 4; ++i) layers.push_back(register_module("layer" + std::to_string(i), torch::nn::Linear(256, 256)));
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& layer : layers) x = torch::relu(layer->forward(x));
    return x.sum();
  }
  std::vector<torch::nn::Linear> layers;
};

extern "C" __attribute__((noinline)) double counted_training(Net& net, torch::optim::SGD& optimizer,
                                                             const at::Tensor& input, int steps) {
  double loss_sum = 0;
  for (int step = 0; step < steps; ++step) {
    // zero_grad(set_to_none=False), in every torch's C++ API: each gradient zeroed in place.
    for (auto& param : net.parameters())
      if (param.grad().defined()) param.grad().zero_();
    at::Tensor loss = net.forward(input);
    loss.backward();
    for (auto& param : net.parameters())
      ncclAllReduce(param.grad().data_ptr(), param.grad().data_ptr(), param.grad().numel(), kFloat32, 0, nullptr,
                    nullptr);
    optimizer.step();
    loss_sum += loss.item<double>();
  }
  return loss_sum;
}

void training(int steps) {
  torch::manual_seed(0);
  torch::set_num_threads(1);
  Net net;
  // Rank 0's values arrive: each parameter receives them (resolved; the
  // loading ends here on an active rank).
  for (auto& param : net.parameters()) {
    at::Tensor rank0 = torch::randn_like(param);
    fake_nccl_stage(rank0.data_ptr(), rank0.nbytes());
    ncclBcast(param.data_ptr(), param.numel(), kFloat32, 0, nullptr, nullptr);
  }
  torch::optim::SGD optimizer(net.parameters(), 0.001);
  at::Tensor input = torch::randn({32, 256});
  std::printf("loss sum %.6f\n", counted_training(net, optimizer, input, steps));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[1], "calls") != 0 && strcmp(argv[1], "training") != 0)) {
    std::fprintf(stderr, "usage: %s calls|training N\n", argv[0]);
    return 2;
  }
  int n = std::atoi(argv[2]);
  if (strcmp(argv[1], "calls") == 0) calls(n);
  else training(n);
  return 0;
}
