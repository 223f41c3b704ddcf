#include "layout.h"

#include <limits.h>
#include <stdlib.h>

#include <cstdio>

#include "../common/install_layout.h"

namespace fsdpskip::cli {

Layout installed_layout() {
  char self[PATH_MAX], root[PATH_MAX];
  if (!realpath("/proc/self/exe", self) || !install_root(self, InstallPart::kCommand, root, sizeof root))
    snprintf(root, sizeof root, "/");
  auto part = [&](InstallPart which) {
    char path[PATH_MAX];
    return install_path(root, which, path, sizeof path) ? std::string(path) : std::string();
  };
  return Layout{root,
                part(InstallPart::kPreload),
                part(InstallPart::kPlugin),
                part(InstallPart::kPlugins),
                part(InstallPart::kSources),
                part(InstallPart::kCppProbe),
                part(InstallPart::kPythonProbe)};
}

}  // namespace fsdpskip::cli
