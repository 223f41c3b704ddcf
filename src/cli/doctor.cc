// `fsdpskip doctor`: can fsdpskip work with this torch? Three questions, in
// order: does the torch library export each interposed symbol and reach it
// through a dynamic relocation (a -Bsymbolic or LTO build binds its calls
// inside, out of LD_PRELOAD's reach); is a plugin built for exactly this
// libtorch installed; and does a live run with FSDPSKIP=on on local rank 1
// see every hook fire and skip.
#include <cxxabi.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "../common/cxx_abi.h"
#include "../common/libraries.h"
#include "../common/options_table.h"
#include "../common/plugin_abi.h"
#include "../common/report_table.h"
#include "doctor.h"
#include "elf_facts.h"
#include "hooks.h"  // the preload's own table: the doctor checks exactly what is interposed
#include "json_fields.h"
#include "layout.h"
#include "options.h"
#include "platform.h"
#include "plugin.h"
#include "subprocess.h"
#include "text_table.h"
#include "torch_location.h"

namespace fsdpskip::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

enum class Status { kOk, kNotApplicable, kFail };

struct Check {
  std::string name;
  Status status;
  std::string detail;
};

const char* status_word(Status status) {
  return status == Status::kOk ? "ok" : status == Status::kFail ? "FAIL" : "n/a";
}

std::string demangled(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), free);
  return status == 0 ? name.get() : mangled;
}

// Rows that differ only in how optional<Generator> is mangled are one
// function in two releases: exactly one of them exists in any torch.
std::string family(const std::string& id) {
  for (const char* suffix : {"_c10_optional", "_std_optional", "_by_value", "_by_reference"})
    if (id.size() > strlen(suffix) && id.compare(id.size() - strlen(suffix), std::string::npos, suffix) == 0)
      return id.substr(0, id.size() - strlen(suffix));
  return id;
}

const char* from_environment(const char* name, void*) { return getenv(name); }

// What the preload would decide in this environment, and the variables it
// read that are set: the same decision and reason FSDPSKIP_LOG=debug prints.
struct Decision {
  Options options;
  std::vector<std::pair<std::string, std::string>> set;
};

Decision decision_here() {
  Decision decision{resolve_options(from_environment, nullptr), {}};
  for (const fsdpskip::Option& option : kOptions)
    if (const char* value = getenv(option.name)) decision.set.emplace_back(option.name, value);
  return decision;
}

std::string decision_text(const Options& options) {
  if (options.error[0]) return std::string("inactive: ") + options.error;
  return std::string(options.active ? "active" : "inactive") + " (" + options.reason + ")";
}

// What the ELF files of torch's libraries say, by soname prefix.
using LibraryFacts = std::map<std::string, ElfFacts>;

// Each of torch's libraries read: a row for one that cannot be, or that
// binds its own calls.
LibraryFacts read_libraries(const Torch& torch, std::vector<Check>* checks) {
  LibraryFacts facts;
  for (Library library : kLibraries) {
    const std::string& path = library_path(torch, library);
    if (path.empty()) continue;
    std::string error;
    if (auto read = read_elf_facts(path, &error)) {
      facts[library_prefix(library)] = *read;
      if (read->symbolic)
        checks->push_back({std::string("linking of ") + library_prefix(library), Status::kFail,
                           path + " was linked with -Bsymbolic: it binds its own calls, LD_PRELOAD cannot reach them"});
    } else {
      checks->push_back({std::string("reading ") + library_prefix(library), Status::kFail, error});
    }
  }
  return facts;
}

// Each interposed row: exported by the library that defines it and reached
// through a dynamic relocation from libtorch (what LD_PRELOAD redirects).
// Returns libtorch_cpu's GNU build-id ("" when it could not be read).
std::string check_symbols(const Torch& torch, const LibraryFacts& facts, std::vector<Check>* checks) {
  std::map<std::string, std::string> present_in_family;
  for (const HookRow& row : kHookRows) {
    auto defining = facts.find(library_prefix(row.library));
    if (defining != facts.end() && defining->second.exported.count(row.mangled)) present_in_family[family(row.id)] = row.id;
  }
  for (const HookRow& row : kHookRows) {
    std::string function = demangled(row.mangled);
    std::string name = "symbol " + function.substr(0, function.find('(')) + " [" + row.id + "]";
    // libtorch_cuda calls NCCL and its own rows; libtorch_cpu the others.
    Library caller = row.library == Library::kTorchCuda || row.library == Library::kNccl ? Library::kTorchCuda
                                                                                         : Library::kTorchCpu;
    auto defining = facts.find(library_prefix(row.library));
    auto calling = facts.find(library_prefix(caller));
    if (defining == facts.end() && row.library == Library::kNccl && facts.count(library_prefix(Library::kTorchCuda))) {
      checks->push_back({name, Status::kNotApplicable,
                         "no libnccl.so is loaded with libtorch_cuda.so: NCCL is linked into it statically; "
                         "rank 0's values are still seen by the ProcessGroupNCCL row, by copies and by frees"});
      continue;
    }
    if (defining == facts.end()) {
      checks->push_back({name, Status::kNotApplicable, std::string("no ") + library_prefix(row.library) + " in this torch"});
      continue;
    }
    const ElfFacts& elf = defining->second;
    if (!elf.exported.count(row.mangled)) {
      auto other = present_in_family.find(family(row.id));
      if (other != present_in_family.end())
        checks->push_back({name, Status::kNotApplicable, "this release has the other mangling (" + other->second + ")"});
      else if (fsdpskip_role_of(row.kernel) == FSDPSKIP_ROLE_STEP)
        checks->push_back({name, Status::kNotApplicable, "not in this release (trunc_normal_ does not use it)"});
      else if (fsdpskip_role_of(row.kernel) == FSDPSKIP_ROLE_READ)
        checks->push_back({name, Status::kNotApplicable,
                           "not in this release: a skipped storage it reads is materialized at the read's fault"});
      else
        checks->push_back({name, Status::kFail, std::string("not exported by ") + library_prefix(row.library) +
                                                    ": this torch is not supported (hooks.def has no row for it)"});
      continue;
    }
    if (elf.protected_.count(row.mangled)) {
      checks->push_back({name, Status::kFail, "protected visibility: bound inside " + library_path(torch, row.library)});
      continue;
    }
    // Python's binding calls broadcast_coalesced: a relocation in libtorch_python serves as well.
    auto python = facts.find(library_prefix(Library::kTorchPython));
    bool python_calls = caller == Library::kTorchCpu && python != facts.end() && python->second.relocated.count(row.mangled);
    if (!python_calls && (calling == facts.end() || !calling->second.relocated.count(row.mangled))) {
      checks->push_back({name, Status::kFail,
                         std::string("exported, but ") + library_prefix(caller) +
                             " calls it directly (-Bsymbolic-functions or LTO): LD_PRELOAD cannot reach those calls"});
      continue;
    }
    checks->push_back({name, Status::kOk,
                       std::string("exported by ") + library_prefix(row.library) + ", called through a relocation"});
  }
  auto libtorch = facts.find(library_prefix(Library::kTorchCpu));
  return libtorch != facts.end() ? libtorch->second.build_id : "";
}

// The C++ ABI libc10 was built with, told as the plugin's build tells it
// (src/common/cxx_abi.h).
void check_cxx_abi(const LibraryFacts& facts, std::vector<Check>* checks) {
  auto c10 = facts.find(library_prefix(Library::kC10));
  if (c10 == facts.end()) return;
  const std::set<std::string>& exported = c10->second.exported;
  bool cxx11 = exported.count(FSDPSKIP_CXX11_ABI_SYMBOL) != 0, old = exported.count(FSDPSKIP_PRE_CXX11_ABI_SYMBOL) != 0;
  checks->push_back({"C++ ABI", cxx11 || old ? Status::kOk : Status::kFail,
                     cxx11 ? "the cxx11 ABI (_GLIBCXX_USE_CXX11_ABI=1), read off libc10's symbols"
                     : old ? "the pre-cxx11 ABI (_GLIBCXX_USE_CXX11_ABI=0), read off libc10's symbols"
                           : "cannot be told from libc10's symbols (no c10::Device::str()): a plugin cannot be "
                             "built for it"});
}

// True when the preload would load a plugin built for exactly this libtorch
// (its build-id): it looks where the preload looks, in the same order.
bool check_plugin(const Torch& torch, const std::string& build_id, const Layout& layout,
                  std::vector<Check>* checks) {
  if (access(layout.preload.c_str(), R_OK) != 0) {
    checks->push_back({"preload", Status::kFail, layout.preload + " is missing: reinstall fsdpskip"});
    return false;
  }
  checks->push_back({"preload", Status::kOk, layout.preload});
  if (build_id.empty()) {
    checks->push_back({"plugin", Status::kFail, "the build-id of " + library_path(torch, Library::kTorchCpu) +
                                                    " cannot be read: no plugin can be matched to it"});
    return false;
  }
  PluginChoice choice = find_plugin(layout, build_id);
  if (choice.path.empty()) {
    std::string passed;
    for (const std::string& why : choice.passed_over) passed += (passed.empty() ? "" : "; ") + why;
    checks->push_back({"plugin", Status::kFail, "none for this libtorch (build-id " + build_id + ") [" + passed +
                                                    "]; build one: " + plugin_build_command(torch)});
    return false;
  }
  uint16_t machine = 0;
  std::string unread;
  read_elf_section(choice.path, FSDPSKIP_TORCH_ID_SECTION, &unread, &machine);
  checks->push_back({"plugin", Status::kOk, choice.path + " (" + choice.place + ") built for this libtorch (torch " +
                                                choice.torch + ", " + machine_text(machine) + ")"});
  return true;
}

// Runs a probe (probe.py or fsdpskip-probe) under the preload and reads its
// steps and its report. Rank 0's data arrives by broadcast in the Python
// probe; the C++ one frees its parameters instead (`by_free`).
void run_probe(const std::vector<std::string>& argv, std::map<std::string, std::string> set, bool by_free,
               const Layout& layout, const std::string& scratch, std::vector<Check>* checks) {
  for (const auto& [name, value] : clean_environment()) set.emplace(name, value);
  set["LD_PRELOAD"] = layout.preload;
  set[option_of(OptionRole::kMode).name] = "on";
  set[option_of(OptionRole::kLocalRank).name] = "1";  // the first local-rank row: before any launcher's
  set[option_of(OptionRole::kLogLevel).name] = "trace";
  set[option_of(OptionRole::kReport).name] = scratch + "/report.json";
  set["OMP_NUM_THREADS"] = "1";
  Finished probe = run_program(argv, set, scratch, 300);
  std::istringstream lines(probe.out);
  for (std::string line; std::getline(lines, line);) {
    json step = json::parse(line, nullptr, false);
    if (!step.is_object() || !step.contains("check")) continue;
    // "ok": true, false, or null for a step that probe cannot run.
    auto ok = step.find("ok");
    Status status = ok != step.end() && ok->is_null() ? Status::kNotApplicable
                    : flag_field(step, "ok", false)   ? Status::kOk
                                                      : Status::kFail;
    checks->push_back({"probe " + text_field(step, "check", "?"), status, text_field(step, "detail", "")});
  }
  if (probe.status != 0 || probe.timed_out) {
    std::string tail = probe.err.size() > 400 ? probe.err.substr(probe.err.size() - 400) : probe.err;
    checks->push_back({"probe run", Status::kFail,
                       (probe.timed_out ? std::string("timed out") : "exit status " + std::to_string(probe.status)) +
                           ": " + tail});
    return;
  }
  json report = json::parse(read_whole_file(scratch + "/report.json"), nullptr, false);
  if (!report.is_object()) {
    checks->push_back({"probe report", Status::kFail, "the probe wrote no report: the plugin did not load"});
    return;
  }
  bool ended = flag_field(report, "loading_ended", false);
  uint64_t pending = count_field(report, key(Counter::pending_count), 1);
  uint64_t storages = count_field(report, key(Counter::storages_skipped), 0);
  uint64_t freed = count_field(report, key(Counter::resolved_by_free), 0);
  uint64_t materialized = count_field(report, key(Counter::storages_replayed), 0);
  // Each probed storage is read (materialized), then freed or broadcast.
  bool ok = pending == 0 && storages > 0 && (by_free ? freed + materialized == storages : ended);
  checks->push_back({"probe report", ok ? Status::kOk : Status::kFail,
                     std::to_string(storages) + " storages skipped, " + std::to_string(materialized) +
                         " materialized, " +
                         (by_free ? std::to_string(freed) + " resolved by free"
                                  : std::string("loading ") + (ended ? "ended at the broadcast" : "never ended")) +
                         ", " + std::to_string(pending) + " pending at exit"});
}

// The results as `--json` prints them.
json results_json(bool ok, const std::vector<Check>& checks, const Decision& decision, const Platform& platform,
                  const std::optional<Torch>& torch) {
  json variables = json::object();
  for (const auto& [name, value] : decision.set) variables[name] = value;
  json out = {{"verdict", ok ? "ok" : "fail"},
              {"checks", json::array()},
              {"decision",
               {{"active", decision.options.active}, {"reason", decision.options.reason},
                {"error", decision.options.error}, {"variables", variables}}}};
  out["platform"] = {{"architecture", platform.architecture}, {"kernel_machine", platform.kernel_machine},
                     {"page_size", platform.page_size}, {"glibc", platform.glibc}, {"multiarch", platform.multiarch}};
  if (torch)
    out["torch"] = {{"version", torch->version}, {"origin", torch->origin},
                    {"libtorch_cpu", library_path(*torch, Library::kTorchCpu)}};
  for (const Check& check : checks)
    out["checks"].push_back({{"check", check.name}, {"status", status_word(check.status)}, {"detail", check.detail}});
  return out;
}

}  // namespace

int doctor(const DoctorOptions& options) {
  Decision decision = decision_here();  // before anything else runs: the user's environment as given
  Layout layout = installed_layout();
  ScratchDirectory scratch("fsdpskip-doctor");
  if (scratch.path().empty()) {
    fprintf(stderr, "fsdpskip doctor: cannot create a scratch directory in %s\n", fs::temp_directory_path().c_str());
    return 2;
  }
  std::string error;
  std::optional<Torch> torch = torch_of(options.python, options.libtorch, scratch.path(), &error);
  std::vector<Check> checks;
  Platform platform = this_platform();
  checks.push_back({"platform", Status::kOk, platform_text(platform)});
  if (!torch) {
    checks.push_back({"torch", Status::kFail, error});
  } else {
    checks.push_back({"torch", Status::kOk, torch->version + " (" + torch->origin + "): " +
                                                library_path(*torch, Library::kTorchCpu)});
    LibraryFacts facts = read_libraries(*torch, &checks);
    std::string build_id = check_symbols(*torch, facts, &checks);
    check_cxx_abi(facts, &checks);
    bool plugin_matches = check_plugin(*torch, build_id, layout, &checks);
    if (!plugin_matches) {
      checks.push_back({"live probe", Status::kNotApplicable, "not run: no plugin for this torch"});
    } else if (options.libtorch.empty()) {
      run_probe({options.python, layout.python_probe, scratch.path() + "/store"}, {}, false, layout, scratch.path(),
                &checks);
    } else if (access(layout.cpp_probe.c_str(), X_OK) != 0) {
      checks.push_back({"live probe", Status::kFail, layout.cpp_probe + " is missing: reinstall fsdpskip"});
    } else {
      // The probe was built with the plugin, so against this very libtorch.
      std::string lib = fs::path(library_path(*torch, Library::kTorchCpu)).parent_path().string();
      run_probe({layout.cpp_probe}, {{"LD_LIBRARY_PATH", lib}}, true, layout, scratch.path(), &checks);
    }
  }

  bool ok = true;
  for (const Check& check : checks) ok = ok && check.status != Status::kFail;
  json results = results_json(ok, checks, decision, platform, torch);
  if (options.json) {
    printf("%s\n", json_text(results, 2).c_str());
  } else {
    TextTable table({"check", "result", "detail"});
    for (const Check& check : checks) table.add({check.name, status_word(check.status), check.detail});
    printf("%sverdict: %s\n", table.render().c_str(),
           ok ? "fsdpskip can work with this torch" : "fsdpskip cannot work as installed (see FAIL above)");
    std::string variables;
    for (const auto& [name, value] : decision.set) variables += (variables.empty() ? "" : " ") + name + "=" + value;
    printf("this environment: %s\n  variables set: %s\n", decision_text(decision.options).c_str(),
           variables.empty() ? "none" : variables.c_str());
  }
  if (!options.json_file.empty()) {
    FILE* file = fopen(options.json_file.c_str(), "w");
    bool written = file != nullptr && fputs((json_text(results, 2) + "\n").c_str(), file) >= 0;
    int cause = errno;
    if (file != nullptr && fclose(file) != 0 && written) written = false, cause = errno;
    if (!written) {
      fprintf(stderr, "fsdpskip doctor: cannot write %s: %s\n", options.json_file.c_str(), strerror(cause));
      return 2;
    }
  }
  return ok ? 0 : 1;
}

}  // namespace fsdpskip::cli
