// libfsdpskip.so: the decision, made at start-up and again whenever the
// program changes one of the policy's variables (environment.cc); the plugin
// on first use (opened by plugin_loading.cc); the summary at exit. In a process that never turns active
// the constructor reads a few variables and nothing else ever happens.
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/libraries.h"
#include "draw_slots.h"
#include "loaded_objects.h"
#include "log.h"
#include "guarded_access.h"
#include "plugin_loading.h"
#include "plugin_search.h"
#include "preload.h"

namespace fsdpskip {

std::atomic<bool> g_routed{false};
void* g_owing_generators[FSDPSKIP_OWING_WORDS] = {};
Options g_options;

namespace {

enum class PluginState { kUntried, kLoaded, kRefused };

pthread_once_t g_plugin_once = PTHREAD_ONCE_INIT;
std::atomic<const fsdpskip_plugin*> g_plugin{nullptr};  // published with release once loaded
std::atomic<PluginState> g_plugin_state{PluginState::kUntried};
// The thread loading the plugin: torch calls it makes meanwhile forward
// (no TLS here: a TLS block costs every process a start-up allocation).
// Published by g_loading's release.
pthread_t g_loading_thread;
std::atomic<bool> g_loading{false};
// Set in a child forked while another thread loaded the plugin: that thread
// does not exist in the child, so its pthread_once never completes there.
std::atomic<bool> g_forked_mid_load{false};

// Copies of the variables' values: the environment can change under us.
char g_report_template[PATH_MAX];
char g_plugin_override[PATH_MAX];
char g_plugin_cache[PATH_MAX];  // the user's plugin directory ("" when HOME and XDG_CACHE_HOME are not absolute)
fsdpskip_host g_host = {FSDPSKIP_PLUGIN_ABI,      say_text, false, FSDPSKIP_MODE_ON, FSDPSKIP_LOG_SUMMARY,
                       FSDPSKIP_STACKS_PYTHON,   FSDPSKIP_ON_PENDING_WARN, -1, -1, -1, -1, nullptr,
                       g_owing_generators,       watch_draws};

// Decisions are made one at a time, under this lock; it is never held while
// torch, the plugin's loading or the dynamic linker runs.
pthread_mutex_t g_policy_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<bool> g_started{false};  // the constructor decided: changes are followed from here on
std::atomic<bool> g_exiting{false};  // at_exit ran: the decision is final
bool g_exit_registered = false;      // under g_policy_lock (or in the constructor)

const char* environment(const char* name, void*) { return getenv(name); }

// The preload's own file, absolute (recorded at start-up when the dynamic
// linker knows it by a relative name: the program may change directory before
// the plugin is looked for), and its owner (trusted like root: plugin_search.h).
char g_preload_path[PATH_MAX];

void remember_preload_path() {
  Dl_info self;
  if (!dladdr(reinterpret_cast<void*>(&remember_preload_path), &self) || self.dli_fname == nullptr) return;
  if (self.dli_fname[0] == '/' || realpath(self.dli_fname, g_preload_path) == nullptr)
    snprintf(g_preload_path, sizeof g_preload_path, "%s", self.dli_fname);
}

// The plugin for this process, with the plugin variables' values as the
// last decision left them.
const fsdpskip_plugin* load_plugin() {
  static char plugin_override[PATH_MAX], plugin_cache[PATH_MAX];  // under pthread_once
  pthread_mutex_lock(&g_policy_lock);  // decide() rewrites them when the program changes a variable
  memcpy(plugin_override, g_plugin_override, sizeof plugin_override);
  memcpy(plugin_cache, g_plugin_cache, sizeof plugin_cache);
  pthread_mutex_unlock(&g_policy_lock);
  return open_plugin(g_preload_path, plugin_override, plugin_cache, &g_host);
}

void load_once() {
  g_loading_thread = pthread_self();
  g_loading.store(true, std::memory_order_release);
  const fsdpskip_plugin* plugin = load_plugin();
  g_loading.store(false, std::memory_order_release);
  g_plugin_state.store(plugin ? PluginState::kLoaded : PluginState::kRefused, std::memory_order_relaxed);
  if (plugin == nullptr) return;
  // A decision made while the plugin loaded did not reach it: hand it the
  // current one, then publish it so later decisions do.
  pthread_mutex_lock(&g_policy_lock);
  // Faults are answered before any skip can guard a page.
  guard_faults(plugin);
  plugin->policy_changed(false);
  g_plugin.store(plugin, std::memory_order_release);
  pthread_mutex_unlock(&g_policy_lock);
}

// The fork handler that keeps a child from inheriting the policy lock held
// by a thread it does not have, or a plugin load that never ends there.
// Registered before a process first takes the lock (when it starts active,
// or first changes a policy variable), never in every process.
void in_forked_child() {
  pthread_mutex_init(&g_policy_lock, nullptr);
  if (g_loading.load(std::memory_order_relaxed)) g_forked_mid_load.store(true, std::memory_order_relaxed);
}

void register_fork_handler() {
  static std::atomic<bool> registered{false};
  if (!registered.exchange(true, std::memory_order_relaxed)) pthread_atfork(nullptr, nullptr, in_forked_child);
}

// The lock, within a bound: an exit path never waits forever (a thread that
// holds it may be blocked writing to a stderr nobody reads). False: not taken.
bool lock_at_exit() {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 2;
  return pthread_mutex_timedlock(&g_policy_lock, &deadline) == 0;
}

// Runs before the libraries' destructors. Interposers forward from here on,
// then the plugin does its shutdown work.
void at_exit() {
  bool locked = lock_at_exit();
  g_exiting.store(true, std::memory_order_relaxed);
  bool was_routed = g_routed.exchange(false, std::memory_order_relaxed);
  if (locked) pthread_mutex_unlock(&g_policy_lock);
  if (!was_routed) return;
  if (const fsdpskip_plugin* plugin = g_plugin.load(std::memory_order_acquire)) {
    plugin->finish();
    return;
  }
  // A helper process (torchrun's agent, a spawned DataLoader worker) that
  // imported torch and made no parameter: nothing to say at the default level.
  char path[PATH_MAX], build_id[128];
  if (g_plugin_state.load(std::memory_order_relaxed) == PluginState::kUntried && says(FSDPSKIP_MESSAGE_DEBUG) &&
      loaded_library_identity(library_prefix(Library::kTorchCpu), path, sizeof path, build_id, sizeof build_id))
    say(FSDPSKIP_MESSAGE_DEBUG, "local rank %d pid %d: torch was loaded but no parameter was initialised; nothing skipped",
              g_options.local_rank, getpid());
}

void copy_value(char* buffer, size_t size, const char* value) { snprintf(buffer, size, "%s", value ? value : ""); }

// Makes `options` the decision (g_policy_lock held). `cause` names the
// variable whose change led here, nullptr at start-up; `stated`: that
// variable was set to a value that states a loading (FSDPSKIP, the auto pair).
void decide(Options options, const char* cause, bool stated) {
  bool was_active = g_options.active;
  set_log_level(options.log_level);
  if (options.error[0]) say(FSDPSKIP_MESSAGE_ERROR, "%s", options.error);
  copy_value(g_plugin_override, sizeof g_plugin_override, options.plugin_path);
  cache_plugin_directory(options.cache_home, getenv("HOME"), g_plugin_cache, sizeof g_plugin_cache);
  const char* report_template = options.report_template;
  options.report_template = options.plugin_path = options.cache_home = nullptr;
  g_options = options;
  bool opens_loading = options.active && (!was_active || stated);
  if (cause == nullptr || was_active != options.active || opens_loading)
    say(FSDPSKIP_MESSAGE_DEBUG, "pid %d: %s%s%s: %s (%s)%s", getpid(), cause ? "after a change of " : "decision at start-up",
              cause ? cause : "", cause ? ", decision" : "", options.active ? "active" : "inactive", options.reason,
              opens_loading && cause ? "; a new loading phase begins" : "");
  if (options.active && !g_exit_registered) {
    g_exit_registered = true;
    atexit(at_exit);
  }
  g_host.active = options.active;
  g_host.log_level = options.log_level;
  g_host.stacks = options.stacks;
  g_host.on_pending = options.on_pending;
  if (options.active) {  // an inactive decision keeps who the process was when it skipped
    g_host.mode = options.mode == Mode::kAudit ? FSDPSKIP_MODE_AUDIT : FSDPSKIP_MODE_ON;
    g_host.local_rank = options.local_rank;
    g_host.rank = options.rank;
    g_host.world_size = options.world_size;
    g_host.local_world_size = options.local_world_size;
    copy_value(g_report_template, sizeof g_report_template, report_template);
    g_host.report_template = g_report_template[0] ? g_report_template : nullptr;
  }
  // Once loaded, the plugin keeps seeing copies, broadcasts and frees while
  // inactive: storages it skipped stay accounted for until rank 0's data lands.
  const fsdpskip_plugin* plugin = g_plugin.load(std::memory_order_acquire);
  g_routed.store(options.active || plugin != nullptr, std::memory_order_relaxed);
  if (plugin != nullptr) plugin->policy_changed(opens_loading);
}

__attribute__((constructor)) void initialise() {
  resolve_guarded_access();
  check_stderr_at_start();
  remember_preload_path();
  Options options = resolve_options(environment, nullptr);
  if (options.active) register_fork_handler();
  decide(options, nullptr, false);
  g_started.store(true, std::memory_order_release);
}

}  // namespace

const fsdpskip_plugin* loaded_plugin() {
  // The common case, once loaded: one load, no TLS lookup, no pthread_once.
  if (const fsdpskip_plugin* plugin = g_plugin.load(std::memory_order_acquire)) return plugin;
  if (g_loading.load(std::memory_order_acquire) && pthread_equal(g_loading_thread, pthread_self())) return nullptr;
  if (g_forked_mid_load.load(std::memory_order_relaxed)) return nullptr;
  pthread_once(&g_plugin_once, load_once);
  return routed() ? g_plugin.load(std::memory_order_acquire) : nullptr;
}

void environment_changed(const char* name, size_t length, bool set) {
  if (!g_started.load(std::memory_order_acquire)) return;  // the constructor reads it itself
  if (name != nullptr && !is_policy_variable(name, length)) return;
  register_fork_handler();  // only processes that touch the policy pay for it
  pthread_mutex_lock(&g_policy_lock);
  if (!g_exiting.load(std::memory_order_relaxed)) {
    char cause[64];
    snprintf(cause, sizeof cause, "%.*s", name ? static_cast<int>(length) : 8, name ? name : "clearenv");
    decide(resolve_options(environment, nullptr), cause, set && name != nullptr && states_loading(name, length));
  }
  pthread_mutex_unlock(&g_policy_lock);
}

}  // namespace fsdpskip
