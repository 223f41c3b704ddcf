// `fsdpskip run`: libfsdpskip.so first in LD_PRELOAD, the variables set,
// then exec. Nothing else stays between the launcher and the program.
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>

#include "../common/options_table.h"
#include "layout.h"
#include "run.h"

namespace fsdpskip::cli {
namespace {

std::string canonical(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) ? resolved : path;
}

std::string file_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

}  // namespace

std::string preload_list_with(const std::string& library, const char* existing) {
  // Any libfsdpskip.so already there goes, whichever build it is: a second
  // copy would interpose nothing and report an idle plugin at exit.
  std::string name = file_name(library), list = library;
  // ld.so separates LD_PRELOAD entries with spaces or colons.
  std::string entries = existing ? existing : "";
  size_t start = 0;
  while (start <= entries.size()) {
    size_t end = entries.find_first_of(": ", start);
    if (end == std::string::npos) end = entries.size();
    std::string entry = entries.substr(start, end - start);
    if (!entry.empty() && file_name(entry) != name && file_name(canonical(entry)) != name) list += " " + entry;
    start = end + 1;
  }
  return list;
}

int run_command(const RunOptions& options) {
  Layout layout = installed_layout();
  if (access(layout.preload.c_str(), R_OK) != 0) {
    fprintf(stderr, "fsdpskip run: %s is missing: reinstall fsdpskip (cmake --install)\n", layout.preload.c_str());
    return 127;
  }
  std::string preload = preload_list_with(layout.preload, getenv("LD_PRELOAD"));
  setenv("LD_PRELOAD", preload.c_str(), 1);
  if (!options.mode.empty()) setenv(option_of(OptionRole::kMode).name, options.mode.c_str(), 1);
  if (!options.report_template.empty())
    setenv(option_of(OptionRole::kReport).name, options.report_template.c_str(), 1);
  if (!options.log_level.empty()) setenv(option_of(OptionRole::kLogLevel).name, options.log_level.c_str(), 1);

  std::vector<char*> argv;
  for (const std::string& argument : options.command) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  int error = errno;
  fprintf(stderr, "fsdpskip run: cannot run '%s': %s\n", argv[0], strerror(error));
  return error == ENOENT ? 127 : 126;  // as shells do
}

}  // namespace fsdpskip::cli
