// Where the parts of an installation are (../common/install_layout.h),
// found from the `fsdpskip` executable itself: the tree can be moved as a
// whole (the build tree has the same shape as an installed one).
#pragma once

#include <string>

namespace fsdpskip::cli {

struct Layout {
  std::string root;
  std::string preload;  // libfsdpskip.so
  std::string plugin;   // libfsdpskip_torch.so beside it (the preload's first place)
  std::string plugins;  // lib/fsdpskip/plugins: the install's plugins, by build-id
  std::string sources;  // share/fsdpskip/src
  std::string cpp_probe;     // doctor --libtorch's live probe (built with the plugin)
  std::string python_probe;  // doctor --python's
};

// The layout around this executable (/proc/self/exe).
Layout installed_layout();

}  // namespace fsdpskip::cli
