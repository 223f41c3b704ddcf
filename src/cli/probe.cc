// The live probe of `fsdpskip doctor --libtorch`: the C++ twin of probe.py,
// built against the same libtorch as the plugin. Run under libfsdpskip.so
// with FSDPSKIP=on, FSDPSKIP_LOCAL_RANK=1 and FSDPSKIP_LOG=trace, each step
// exercises one interposed symbol on a fresh parameter, reads the plugin's
// trace lines (fd 2) and checks the values; one JSON object per step on
// stdout. LibTorch ships no gloo headers, so rank 0's data cannot be made to
// arrive here: the probe frees its parameters instead, and the report must
// show every skipped storage resolved by that free.
#include <torch/types.h>  // not torch/torch.h, which doubles the compile time
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr int64_t kElements = 1 << 12;

struct Captured {
  std::string error;  // what the step threw, "" when nothing
  std::string trace;  // what was written to fd 2 meanwhile
};

Captured captured(const std::function<void()>& step) {
  Captured result;
  FILE* sink = tmpfile();
  fflush(stderr);
  int saved = dup(2);
  dup2(fileno(sink), 2);
  try {
    step();
  } catch (const c10::Error& error) {
    result.error = std::string("c10::Error: ") + error.what_without_backtrace();
  } catch (const std::exception& error) {
    result.error = error.what();
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(sink);
  char buffer[4096];
  size_t count;
  while ((count = fread(buffer, 1, sizeof buffer, sink)) > 0) result.trace.append(buffer, count);
  fclose(sink);
  result.error = result.error.substr(0, result.error.find('\n'));
  return result;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

// ok: "true", "false", or "null" for a step this probe cannot run.
void report(const std::string& check, const char* ok, const std::string& detail) {
  std::printf("{\"check\": %s, \"ok\": %s, \"detail\": %s}\n", quoted(check).c_str(), ok, quoted(detail).c_str());
  std::fflush(stdout);
}

void report(const std::string& check, bool ok, const std::string& detail) {
  report(check, ok ? "true" : "false", detail);
}

// A parameter over memory holding 7.0, as a loader's placeholder would.
at::Tensor placeholder() { return torch::full({kElements}, 7.0).set_requires_grad(true); }

using Init = std::function<at::Tensor(const at::Tensor&)>;

// What `run` gives a plain tensor (not a parameter: never skipped) from the
// default generator's state `state`; the generator is left where it was.
at::Tensor without_fsdpskip(const Init& run, const at::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor after = generator.get_state();
  generator.set_state(state);
  at::Tensor reference = run(torch::full({kElements}, 7.0));
  generator.set_state(after);
  return reference;
}

// Skipped: a '<kernel> -> skip' trace line; read afterwards (which
// materializes it), it holds what the call gives without fsdpskip.
void skipped_as(const std::string& check, const std::string& kernel, const at::Tensor& tensor, const Init& run,
                const std::function<at::Tensor()>& expected = nullptr) {
  at::Tensor result;
  at::Tensor state = at::detail::getDefaultCPUGenerator().get_state();
  Captured step = captured([&] { result = run(tensor); });
  if (!step.error.empty()) return report(check, false, "raised " + step.error);
  bool fired = step.trace.find(kernel + " -> skip") != std::string::npos;
  at::Tensor reference = expected ? expected() : without_fsdpskip(run, state);
  bool same = torch::equal((result.defined() ? result : tensor).detach(), reference.detach());
  report(check, fired && same,
         fired && same ? "skipped; read, it holds the values without fsdpskip"
                       : std::string("hook ") + (fired ? "fired" : "never fired") + ", values " +
                             (same ? "as without fsdpskip" : "differ"));
}

}  // namespace

int main() {
  std::vector<at::Tensor> kept;
  auto fresh = [&] { return kept.emplace_back(placeholder()); };
  torch::manual_seed(0);  // the plugin loads here, before the first parameter's storage is made

  // c10::TensorImpl::set_requires_grad tags the storage.
  skipped_as("set_requires_grad", "normal_", fresh(), [](const at::Tensor& t) { return t.data().normal_(); });
  skipped_as("normal_", "normal_", fresh(), [](const at::Tensor& t) { return t.data().normal_(0.0, 0.02); });
  skipped_as("uniform_", "uniform_", fresh(), [](const at::Tensor& t) { return t.data().uniform_(-1.0, 1.0); });
  skipped_as("zero_", "zero_", fresh(), [](const at::Tensor& t) { return t.data().zero_(); });
  skipped_as("fill_ (Scalar)", "fill_", fresh(), [](const at::Tensor& t) { return t.data().fill_(3.0); });
  skipped_as("fill_ (Tensor)", "fill_", fresh(),
             [](const at::Tensor& t) { return t.data().fill_(torch::tensor(3.0)); });

  // at::TensorBase::set_data moves the tag to the new storage.
  at::Tensor replaced = torch::empty({0}).set_requires_grad(true);
  replaced.set_data(torch::full({kElements}, 7.0));
  kept.push_back(replaced);
  skipped_as("set_data", "normal_", replaced, [](const at::Tensor& t) { return t.data().normal_(); });

  // at::native::copy_: converting a skipped placeholder stays skipped.
  at::Tensor source = fresh();
  captured([&] { source.data().normal_(); });
  skipped_as(
      "copy_ (conversion)", "copy_", source, [](const at::Tensor& t) { return t.data().to(torch::kDouble); },
      [&] { return source.detach().to(torch::kDouble); });

  // trunc_normal_ as torch.nn.init up to 2.11 does it: uniform_, then in place
  // erfinv_, mul_, add_, clamp_ (LibTorch's C++ API has no trunc_normal_).
  // Each step is skipped and joins uniform_'s recipe; read, the storage
  // holds exactly the values without fsdpskip.
  at::Tensor truncated = fresh();
  Init truncate = [](const at::Tensor& t) {
    at::NoGradGuard no_grad;
    return t.uniform_(-0.9, 0.9).erfinv_().mul_(0.02 * std::sqrt(2.0)).add_(0.0).clamp_(-0.04, 0.04);
  };
  at::Tensor state = at::detail::getDefaultCPUGenerator().get_state();
  Captured chain = captured([&] { truncate(truncated); });
  std::string unfired;
  for (const char* step : {"erfinv_", "mul_", "add_", "clamp_"})
    if (chain.trace.find(std::string(step) + " -> skip") == std::string::npos)
      unfired += (unfired.empty() ? "" : ", ") + std::string(step);
  bool same = chain.error.empty() && torch::equal(truncated.detach(), without_fsdpskip(truncate, state));
  report("trunc_normal_", same,
         !chain.error.empty() ? "raised " + chain.error : same ? "as without fsdpskip" : "values differ");
  report("chain (erfinv_, mul_, add_, clamp_)", same && unfired.empty(),
         unfired.empty() ? "skipped, joined to uniform_'s recipe" : "not skipped: " + unfired);

  // torch's own argument checks still raise on a skipped call.
  at::Tensor checked = fresh();
  Captured error = captured([&] { checked.data().normal_(0.0, -1.0); });
  report("errors pass through", !error.error.empty(),
         error.error.empty() ? "normal_ with std < 0 raised nothing" : "normal_ with std < 0 raised " + error.error);

  kept.clear();  // freed: each skipped storage is resolved (by free) in the report
  source.reset(), replaced.reset(), truncated.reset(), checked.reset();
  report("gloo broadcast", "null", "not probed from C++ (LibTorch has no gloo headers); parameters freed instead");
  return 0;
}
