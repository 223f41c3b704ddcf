// The FSDPSKIP_REPORT template (src/torch/report_file.cc) over any text: `%`
// sequences known and unknown, a `%` at the end, long and binary paths. A
// template expands exactly when every `%` starts a known sequence, and then
// each sequence becomes its field and every other byte stays.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <string>

#include "report_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path_template(reinterpret_cast<const char*>(data), size);
  setenv("SLURM_JOB_ID", "77", 1);
  fsdpskip_host host{};
  host.rank = 12;
  host.local_rank = 3;
  fsdpskip::ReportContext context{&host, "node", 4242};
  std::string path, error;
  bool expanded = fsdpskip::expand_report_path(path_template, context, &path, &error);

  const std::string known = "rlphj%";
  const std::string fields[] = {"12", "3", "4242", "node", "77", "%"};
  std::string expected;
  bool valid = true;
  for (size_t i = 0; i < size && valid; ++i) {
    if (path_template[i] != '%') {
      expected += path_template[i];
      continue;
    }
    size_t which = i + 1 < size ? known.find(path_template[i + 1]) : std::string::npos;
    if (which == std::string::npos) valid = false;
    else expected += fields[which], ++i;
  }
  if (expanded != valid) __builtin_trap();                 // accepted a typo, or refused a good template
  if (expanded && path != expected) __builtin_trap();      // a byte lost, added or misplaced
  if (!expanded && error.find("(known: %r %l %p %h %j %%)") == std::string::npos) __builtin_trap();
  return 0;
}
