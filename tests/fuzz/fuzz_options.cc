// The policy (src/preload/options.cc) over an arbitrary environment: the
// input is NAME=VALUE lines; every variable the policy reads may hold anything.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <map>
#include <string>

#include "options.h"

namespace {

const char* lookup(const char* name, void* context) {
  auto* variables = static_cast<std::map<std::string, std::string>*>(context);
  auto found = variables->find(name);
  return found == variables->end() ? nullptr : found->second.c_str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> variables;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    size_t equals = line.find('=');
    if (equals != std::string::npos) variables[line.substr(0, equals)] = line.substr(equals + 1);
    fsdpskip::is_policy_variable(line.data(), equals == std::string::npos ? line.size() : equals);
    fsdpskip::states_loading(line.data(), equals == std::string::npos ? line.size() : equals);
    at = end + 1;
  }
  fsdpskip::Options options = fsdpskip::resolve_options(lookup, &variables);
  if (strnlen(options.reason, sizeof options.reason) == sizeof options.reason ||
      strnlen(options.error, sizeof options.error) == sizeof options.error)
    __builtin_trap();  // a message left without its terminating NUL
  return 0;
}
