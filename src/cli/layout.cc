#include "layout.h"

#include <limits.h>
#include <stdlib.h>

namespace fsdpskip::cli {

Layout installed_layout() {
  char self[PATH_MAX];
  std::string root = realpath("/proc/self/exe", self) ? self : "";
  for (int level = 0; level < 2; ++level) root = root.substr(0, root.rfind('/'));  // drop /bin/fsdpskip
  if (root.empty()) root = "/";
  return Layout{root, root + "/lib/libfsdpskip.so", root + "/lib/libfsdpskip_torch.so",
                root + "/libexec/fsdpskip/fsdpskip-probe", root + "/share/fsdpskip/probe.py"};
}

}  // namespace fsdpskip::cli
