// An ordinary LibTorch program that knows nothing of fsdpskip: it builds
// torch::nn modules (whose constructors run their default inits), prints a
// digest of every parameter, a seeded randn of a non-parameter, and the
// error torch raises for a bad init argument. The tests compare its output
// with and without the preload. Arguments NAME=VALUE (setenv(3)) and -NAME
// (unsetenv(3)) change the environment before anything else, as a program
// configuring itself at run time would.
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

uint64_t fnv1a(const at::Tensor& tensor) {
  at::Tensor bytes = tensor.detach().contiguous();
  auto* data = static_cast<const unsigned char*>(bytes.data_ptr());
  uint64_t hash = 1469598103934665603ull;
  for (int64_t i = 0; i < bytes.nbytes(); ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

void print(const std::string& name, const at::Tensor& tensor) {
  std::printf("%s bytes=%lld digest=%016llx all_zero=%d first=%.6g\n", name.c_str(),
              static_cast<long long>(tensor.nbytes()), static_cast<unsigned long long>(fnv1a(tensor)),
              tensor.abs().sum().item<double>() == 0.0, tensor.flatten()[0].item<double>());
}

// A parameter filled with a sentinel by hand, then initialised with normal_.
struct Sentinel : torch::nn::Module {
  Sentinel() {
    weight = register_parameter("weight", torch::empty({4096}));
    float* data = weight.data_ptr<float>();
    for (int i = 0; i < 4096; ++i) data[i] = 1234.5f;
    torch::NoGradGuard no_grad;
    weight.normal_(0.0, 0.02);
  }
  torch::Tensor weight;
};

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string assignment = argv[i];
    size_t equals = assignment.find('=');
    bool changed = assignment[0] == '-'               ? unsetenv(argv[i] + 1) == 0
                   : equals != std::string::npos ? setenv(assignment.substr(0, equals).c_str(), argv[i] + equals + 1, 1) == 0
                                                 : false;
    if (!changed) {
      std::fprintf(stderr, "usage: %s [NAME=VALUE...]\n", argv[0]);
      return 2;
    }
  }
  torch::manual_seed(42);
  torch::nn::Sequential model(torch::nn::Linear(256, 512), torch::nn::LayerNorm(torch::nn::LayerNormOptions({512})),
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3)), torch::nn::Embedding(1000, 64));
  auto sentinel = std::make_shared<Sentinel>();
  for (const auto& item : model->named_parameters()) print(item.key(), item.value());
  print("sentinel.weight", sentinel->weight);

  torch::manual_seed(7);
  print("randn", torch::randn({1000}));
  try {
    torch::NoGradGuard no_grad;
    model->named_parameters()[0].value().normal_(0.0, -1.0);
    std::printf("error: none\n");
  } catch (const c10::Error& error) {
    std::string message = error.what_without_backtrace();
    std::printf("error: %s\n", message.substr(0, message.find('\n')).c_str());
  }
  return 0;
}
