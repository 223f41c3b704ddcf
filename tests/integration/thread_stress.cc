// Threads that make parameters, initialise them, copy rank 0's values into
// them and free them, all at once, while the main thread forks children that
// do the same and exit through exit(3) or _exit(2): a threaded loader with
// DataLoader workers forked in the middle. It knows nothing of fsdpskip: it
// counts the parameters that read as zeros after their init (on an active
// rank, all of them: every init is skipped) and those that read as their
// copy after it (all of them, everywhere). tools/sanitize runs it under
// ThreadSanitizer.
//
//   thread_stress [THREADS ITERATIONS FORKS [warm]]     default 8 200 6
// warm: the main thread makes one parameter before the threads start, so no
// fork lands while fsdpskip looks up torch's originals. Under TSan only: its
// dlopen interceptor holds a lock of its own that a fork copies as held,
// and the child then hangs in exit.
// Prints "parameters=P zero_after_init=Z copied=C" for the threads, then the
// same for the forked children.
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <torch/types.h>  // not torch/torch.h, which doubles the compile time

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Counts {
  std::atomic<int> parameters{0}, zero_after_init{0}, copied{0};
  void print(const char* who) {
    std::printf("%s: parameters=%d zero_after_init=%d copied=%d\n", who, parameters.load(), zero_after_init.load(),
                copied.load());
  }
};

enum Outcome { kZeroAfterInit = 1, kCopied = 2 };

// One parameter's life: made, initialised by one of the init kernels in
// turn, given its values by a copy, then freed.
int one_parameter(int thread, int iteration) {
  int64_t size = 1024 + (thread * 131 + iteration * 17) % 4096;
  at::Tensor parameter = torch::empty({size});
  parameter.set_requires_grad(true);
  {
    at::NoGradGuard no_grad;
    switch (iteration % 4) {
      case 0: parameter.normal_(0.0, 0.02); break;
      case 1: parameter.uniform_(-0.1, 0.1); break;
      case 2: parameter.zero_(); break;
      default: parameter.fill_(0.5); break;
    }
  }
  // Read through mul, a kernel fsdpskip intercepts, which materializes a
  // skipped storage before it runs: ThreadSanitizer (tools/sanitize) cannot
  // follow a fault handler that runs torch's kernels. The fault path is
  // tested elsewhere (tests/integration/exactness.py).
  bool initialised_reads_zero = parameter.mul(1.0).abs().sum().item<double>() == 0.0;
  at::Tensor values = torch::arange(size, torch::kFloat) + thread;
  {
    at::NoGradGuard no_grad;
    parameter.copy_(values);
  }
  return (initialised_reads_zero ? kZeroAfterInit : 0) | (parameter.equal(values) ? kCopied : 0);
}

void count(Counts* counts, int outcome) {
  ++counts->parameters;
  if (outcome & kZeroAfterInit) ++counts->zero_after_init;
  if (outcome & kCopied) ++counts->copied;
}

void worker(Counts* counts, int thread, int iterations) {
  for (int i = 0; i < iterations; ++i) count(counts, one_parameter(thread, i));
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 3 ? std::atoi(argv[1]) : 8;
  int iterations = argc > 3 ? std::atoi(argv[2]) : 200;
  int forks = argc > 3 ? std::atoi(argv[3]) : 6;
  at::set_num_threads(1);  // the threads are this program's own, not torch's pool
  if (argc > 4 && std::string(argv[4]) == "warm") one_parameter(0, 0);

  Counts in_threads, in_children;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, &in_threads, t, iterations);
  // Forks land while the threads are busy, once one parameter is done: a
  // child forked before its process's first call into torch is a process of
  // its own (README, known limits).
  while (in_threads.parameters == 0) usleep(1000);
  for (int f = 0; f < forks; ++f) {
    usleep(20000);
    pid_t child = fork();
    if (child == 0) {  // its outcome is its exit status; a hang ends by SIGALRM, a failure
      alarm(120);
      // zero_ or fill_ only: a thread may hold torch's default generator's
      // mutex at the fork, and normal_ in the child would wait on it forever
      // (torch's own hazard; seen under TSan, with or without fsdpskip).
      int outcome = one_parameter(threads + f, 2 + f % 2);
      if (f % 2) _exit(outcome);
      std::exit(outcome);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
      std::fprintf(stderr, "thread_stress: forked child %d did not exit\n", f);
      return 1;
    }
    count(&in_children, WEXITSTATUS(status));
  }
  for (auto& thread : pool) thread.join();
  in_threads.print("threads");
  in_children.print("children");
  return 0;
}
