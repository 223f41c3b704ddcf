// libfsdpskip.so: the decision at start-up, the plugin on first use, the
// summary at exit. In an inactive process the constructor reads a few
// variables and nothing else ever happens.
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elf_identity.h"
#include "log.h"
#include "state.h"

namespace fsdpskip {

bool g_active = false;
Options g_options;

namespace {

constexpr char kPluginName[] = "libfsdpskip_torch.so";
constexpr char kTorchLibrary[] = "libtorch_cpu.so";

enum class PluginState { kUntried, kLoaded, kRefused };

pthread_once_t g_plugin_once = PTHREAD_ONCE_INIT;
const fsdpskip_plugin* g_plugin = nullptr;  // published with release once loaded
PluginState g_plugin_state = PluginState::kUntried;
// The thread loading the plugin: torch calls it makes meanwhile forward
// (no TLS here: a TLS block costs every process a start-up allocation).
pthread_t g_loading_thread;
bool g_loading = false;

// Copies of the variables' values: the environment can change under us.
char g_report_template[PATH_MAX];
char g_plugin_override[PATH_MAX];
fsdpskip_host g_host;

const char* environment(const char* name, void*) { return getenv(name); }

// The value of "key=" on its own line of the plugin's identity section.
const char* identity_field(const char* identity, const char* key, char* out, size_t out_size) {
  size_t key_length = strlen(key);
  for (const char* line = identity; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : nullptr) {
    if (strncmp(line, key, key_length) != 0 || line[key_length] != '=') continue;
    const char* value = line + key_length + 1;
    size_t length = strcspn(value, "\n");
    snprintf(out, out_size, "%.*s", static_cast<int>(length), value);
    return out;
  }
  snprintf(out, out_size, "?");
  return out;
}

void plugin_path(char* out, size_t out_size) {
  if (g_plugin_override[0]) {
    snprintf(out, out_size, "%s", g_plugin_override);
    return;
  }
  Dl_info self;
  dladdr(reinterpret_cast<void*>(&plugin_path), &self);
  const char* slash = strrchr(self.dli_fname, '/');
  int directory = slash ? static_cast<int>(slash - self.dli_fname) : 1;
  snprintf(out, out_size, "%.*s/%s", directory, slash ? self.dli_fname : ".", kPluginName);
}

const fsdpskip_plugin* load_plugin() {
  char path[PATH_MAX];
  plugin_path(path, sizeof path);
  char identity[1024];
  if (!read_file_section(path, FSDPSKIP_TORCH_ID_SECTION, identity, sizeof identity)) {
    if (access(path, R_OK) != 0)
      log_warning("torch plugin not found at %s (set FSDPSKIP_PLUGIN or reinstall); inactive in this process", path);
    else
      log_warning("%s is not a fsdpskip torch plugin (no %s section); inactive in this process", path,
                  FSDPSKIP_TORCH_ID_SECTION);
    return nullptr;
  }
  char torch_path[PATH_MAX], loaded_id[128], expected_id[128], expected_version[64];
  identity_field(identity, "build-id", expected_id, sizeof expected_id);
  identity_field(identity, "torch", expected_version, sizeof expected_version);
  if (!loaded_library_identity(kTorchLibrary, torch_path, sizeof torch_path, loaded_id, sizeof loaded_id)) {
    log_warning("no %s is loaded in this process; inactive", kTorchLibrary);
    return nullptr;
  }
  if (strcmp(expected_id, loaded_id) != 0) {
    log_warning("plugin %s was built for torch %s (libtorch_cpu build-id %s) but this process runs %s "
                "(build-id %s); inactive in this process. Rebuild it against this torch (README: "
                "\"Build against your own torch\")",
                path, expected_version, expected_id, torch_path, loaded_id[0] ? loaded_id : "none");
    return nullptr;
  }
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    log_warning("cannot load %s: %s; inactive in this process", path, dlerror());
    return nullptr;
  }
  auto load = reinterpret_cast<fsdpskip_plugin_load_fn>(dlsym(handle, FSDPSKIP_PLUGIN_ENTRY));
  if (load == nullptr) {
    log_warning("%s has no %s; inactive in this process", path, FSDPSKIP_PLUGIN_ENTRY);
    return nullptr;
  }
  g_host = {FSDPSKIP_PLUGIN_ABI,
            g_options.mode == Mode::kAudit ? FSDPSKIP_MODE_AUDIT : FSDPSKIP_MODE_ON,
            g_options.log_level,
            g_options.local_rank,
            g_options.rank,
            g_report_template[0] ? g_report_template : nullptr};
  const fsdpskip_plugin* plugin = load(&g_host);  // prints its own reason on NULL
  if (plugin != nullptr && plugin->abi != FSDPSKIP_PLUGIN_ABI) {
    log_warning("%s speaks plugin ABI %u, this preload %d; inactive in this process", path, plugin->abi,
                FSDPSKIP_PLUGIN_ABI);
    return nullptr;
  }
  return plugin;
}

void load_once() {
  g_loading_thread = pthread_self();
  __atomic_store_n(&g_loading, true, __ATOMIC_RELEASE);
  const fsdpskip_plugin* plugin = load_plugin();
  __atomic_store_n(&g_loading, false, __ATOMIC_RELEASE);
  g_plugin_state = plugin ? PluginState::kLoaded : PluginState::kRefused;
  __atomic_store_n(&g_plugin, plugin, __ATOMIC_RELEASE);
}

// Runs before the libraries' destructors. Interposers forward from here on,
// then the plugin does its shutdown work.
void at_exit() {
  bool was_active = g_active;
  g_active = false;
  if (!was_active) return;
  if (g_plugin != nullptr) {
    g_plugin->finish();
    return;
  }
  char path[PATH_MAX], build_id[128];
  if (g_plugin_state == PluginState::kUntried && g_options.log_level >= FSDPSKIP_LOG_SUMMARY &&
      loaded_library_identity(kTorchLibrary, path, sizeof path, build_id, sizeof build_id))
    log_error("local rank %d pid %d: torch was loaded but no parameter was initialised; nothing skipped",
              g_options.local_rank, getpid());
}

__attribute__((constructor)) void initialise() {
  g_options = resolve_options(environment, nullptr);
  if (g_options.error[0]) log_error("%s", g_options.error);
  if (!g_options.active) return;
  snprintf(g_report_template, sizeof g_report_template, "%s",
           g_options.report_template ? g_options.report_template : "");
  snprintf(g_plugin_override, sizeof g_plugin_override, "%s",
           g_options.plugin_path ? g_options.plugin_path : "");
  g_options.report_template = g_options.plugin_path = nullptr;
  g_active = true;
  atexit(at_exit);
}

}  // namespace

const fsdpskip_plugin* loaded_plugin() {
  // The common case, once loaded: one load, no TLS lookup, no pthread_once.
  if (const fsdpskip_plugin* plugin = __atomic_load_n(&g_plugin, __ATOMIC_ACQUIRE)) return plugin;
  if (__atomic_load_n(&g_loading, __ATOMIC_ACQUIRE) && pthread_equal(g_loading_thread, pthread_self())) return nullptr;
  pthread_once(&g_plugin_once, load_once);
  return g_active ? g_plugin : nullptr;
}

}  // namespace fsdpskip
