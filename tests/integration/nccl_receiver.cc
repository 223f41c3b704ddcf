// A LibTorch program whose parameters receive rank 0's values through NCCL's
// C API, one call of each kind the preload interposes (ncclBroadcast,
// ncclBcast, ncclRecv), linked against the tests' stand-in libnccl.so.2. It
// prints, per parameter, whether it holds rank 0's values afterwards.
#include "nccl_datatypes.h"  // NCCL's own numbers (tests/CMakeLists.txt)

// The nn modules it uses, not torch/torch.h (which takes 16 s to compile
// against 10 s for these): libtorch_model.cc is the program that includes
// everything, as most LibTorch programs do.
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cstdio>

extern "C" {
int ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, int datatype, int root, void* comm,
                  void* stream);
int ncclBcast(void* buff, size_t count, int datatype, int root, void* comm, void* stream);
int ncclRecv(void* recvbuff, size_t count, int datatype, int peer, void* comm, void* stream);
void fake_nccl_stage(const void* data, size_t bytes);
}

int main() {
  constexpr int kFloat = ncclFloat32;
  torch::manual_seed(0);
  torch::nn::Linear broadcast(64, 128), bcast(64, 128), recv(64, 128);
  int status = 0;
  for (const auto& item : torch::nn::Sequential(broadcast, bcast, recv)->named_parameters()) {
    at::Tensor param = item.value();
    at::Tensor rank0 = torch::randn_like(param);  // what rank 0 holds
    void* destination = param.data_ptr();
    size_t count = param.numel();
    if (item.key().rfind("0.", 0) == 0) {
      status |= ncclBroadcast(rank0.data_ptr(), destination, count, kFloat, 0, nullptr, nullptr);
    } else {
      fake_nccl_stage(rank0.data_ptr(), rank0.nbytes());
      status |= item.key().rfind("1.", 0) == 0 ? ncclBcast(destination, count, kFloat, 0, nullptr, nullptr)
                                               : ncclRecv(destination, count, kFloat, 0, nullptr, nullptr);
    }
    std::printf("%s equal_to_rank0=%d\n", item.key().c_str(), torch::equal(param.detach(), rank0));
  }
  return status;
}
