#include "layout.h"

#include <limits.h>
#include <stdlib.h>

#include "plugin_search.h"

namespace fsdpskip::cli {

Layout installed_layout() {
  char self[PATH_MAX];
  std::string root = realpath("/proc/self/exe", self) ? self : "";
  for (int level = 0; level < 2; ++level) root = root.substr(0, root.rfind('/'));  // drop /bin/fsdpskip
  if (root.empty()) root = "/";
  std::string preload = root + "/lib/libfsdpskip.so";
  char plugins[PATH_MAX];
  install_plugin_directory(preload.c_str(), plugins, sizeof plugins);
  return Layout{root,
                preload,
                root + "/lib/" + kPluginFileName,
                plugins,
                root + "/share/fsdpskip/src",
                root + "/libexec/fsdpskip/fsdpskip-probe",
                root + "/share/fsdpskip/probe.py"};
}

}  // namespace fsdpskip::cli
