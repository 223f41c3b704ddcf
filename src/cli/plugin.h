// `fsdpskip plugin build` and `fsdpskip plugin list`: a plugin for every torch
// on the machine from one install. Where plugins go and the order in which
// the preload looks for them are plugin_search.h's.
#pragma once

#include <string>
#include <vector>

#include "layout.h"
#include "torch_location.h"

namespace fsdpskip::cli {

struct PluginBuildOptions {
  std::string python = "python3";  // a Python whose torch to build for (unused when libtorch is given)
  std::string libtorch;  // a LibTorch directory
  bool system = false;   // into the install's plugins instead of the user's cache
  int jobs = 0;          // 0: one per processor
};
// Builds libfsdpskip_torch.so for that torch from the install's sources and
// puts it where the preload looks for that build-id. Exit status 0 or 1.
int plugin_build(const PluginBuildOptions& options);

struct PluginListOptions {
  bool json = false;
};
// Every plugin in the places the preload searches, for which torch, and
// whether the preload would load it.
int plugin_list(const PluginListOptions& options);

// The plugin the preload of `layout` would load for libtorch_cpu build-id
// `build_id` in this environment, or why none.
struct PluginChoice {
  std::string path;                      // "" when none would load
  std::string place;                     // plugin_place_name of where it was found
  std::string torch;                     // the torch version it records
  std::vector<std::string> passed_over;  // "<place>: <why>" for each file passed over
};
PluginChoice find_plugin(const Layout& layout, const std::string& build_id);

// The one command that builds a plugin for `torch` ("fsdpskip plugin build --python …").
std::string plugin_build_command(const Torch& torch);

}  // namespace fsdpskip::cli
