// The hook table against the built preload and the real libtorch.
#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../../src/common/elf_file.h"
#include "environment.h"
#include "guarded_access.h"
#include "hooks.h"

namespace fsdpskip {
namespace {

std::set<std::string> lines_of(const std::string& command) {
  std::set<std::string> lines;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  char line[4096];
  while (pipe && fgets(line, sizeof line, pipe.get())) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    lines.insert(text);
  }
  return lines;
}

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), free);
  return status == 0 ? name.get() : "";
}

TEST(HookTable, EveryRowDemanglesToATorchFunctionOrIsNcclsCApi) {
  for (int i = 0; i < kHookCount; ++i) {
    if (kHookRows[i].library == Library::kNccl) {
      EXPECT_EQ(std::string(kHookRows[i].mangled).rfind("nccl", 0), 0u) << kHookRows[i].mangled;
      continue;
    }
    std::string name = demangle(kHookRows[i].mangled);
    ASSERT_FALSE(name.empty()) << kHookRows[i].mangled;
    EXPECT_TRUE(name.rfind("at::native::", 0) == 0 || name.rfind("at::TensorBase::", 0) == 0 ||
                name.rfind("at::CPUGeneratorImpl::", 0) == 0 || name.rfind("c10::", 0) == 0 ||
                name.rfind("c10d::", 0) == 0)
        << name;
  }
}

TEST(HookTable, NamesAreUnique) {
  std::set<std::string> mangled, ids;
  for (int i = 0; i < kHookCount; ++i) {
    EXPECT_TRUE(mangled.insert(kHookRows[i].mangled).second) << kHookRows[i].mangled;
    EXPECT_TRUE(ids.insert(kHookRows[i].id).second) << kHookRows[i].id;
  }
}

TEST(HookTableEveryBuild, PreloadExportsExactlyTheTable) {
  std::set<std::string> exported =
      lines_of(std::string("nm -D --defined-only --format=just-symbols ") + FSDPSKIP_PRELOAD);
  std::set<std::string> expected;
  for (int i = 0; i < kHookCount; ++i) expected.insert(kHookRows[i].mangled);
  expected.insert(std::begin(kEnvironmentFunctions), std::end(kEnvironmentFunctions));
  expected.insert(std::begin(kGuardedAccessFunctions), std::end(kGuardedAccessFunctions));
  EXPECT_EQ(exported, expected);
}

TEST(HookTableEveryBuild, PreloadNeedsGlibcAlone) {
  std::set<std::string> needed = lines_of(std::string("readelf -d ") + FSDPSKIP_PRELOAD +
                                          " | sed -n 's/.*(NEEDED).*\\[\\(.*\\)\\]/\\1/p'");
  ASSERT_FALSE(needed.empty());
  const std::set<std::string> glibc = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6"};
  // The dynamic linker's name is the architecture's (ld-linux-x86-64.so.2,
  // ld-linux-aarch64.so.1); a sanitized build (tools/sanitize) needs the
  // sanitizers' runtimes too, and nothing else.
  std::vector<std::string> prefixes = {"ld-linux-"};
#ifdef FSDPSKIP_SANITIZED
  prefixes.insert(prefixes.end(), {"libasan.so.", "libubsan.so.", "libtsan.so."});
#endif
  for (const std::string& library : needed) {
    bool allowed = glibc.count(library) > 0;
    for (const std::string& prefix : prefixes) allowed = allowed || library.rfind(prefix, 0) == 0;
    EXPECT_TRUE(allowed) << library << " is not glibc";
  }
}

// DT_FLAGS of a file's dynamic section (0 when it has none).
uint64_t dynamic_flags(const char* path) {
  ElfFile elf(path);
  Elf64_Shdr dynamic;
  if (elf.problem() || !elf.find_section(".dynamic", &dynamic)) return 0;
  for (size_t i = 0; i < elf.entries<Elf64_Dyn>(dynamic); ++i) {
    Elf64_Dyn entry;
    if (elf.entry(dynamic, i, &entry) && entry.d_tag == DT_FLAGS) return entry.d_un.d_val;
  }
  return 0;
}

// Static TLS is scarce (on aarch64 above all): a dlopen'd object that needs
// it can fail with "cannot allocate memory in static TLS block". The plugin
// is dlopen'd: its thread_locals must use the dynamic models. The preload
// has no TLS at all (a TLS block costs every process an allocation).
TEST(HookTableEveryBuild, ThePluginNeedsNoStaticTlsAndThePreloadNoTls) {
  EXPECT_EQ(dynamic_flags(FSDPSKIP_PLUGIN) & DF_STATIC_TLS, 0u);
  Elf64_Shdr section;
  ElfFile preload(FSDPSKIP_PRELOAD);
  ASSERT_EQ(preload.problem(), nullptr);
  EXPECT_FALSE(preload.find_section(".tbss", &section));
  EXPECT_FALSE(preload.find_section(".tdata", &section));
  ElfFile plugin(FSDPSKIP_PLUGIN);
  EXPECT_TRUE(plugin.find_section(".tbss", &section) || plugin.find_section(".tdata", &section))
      << "the plugin's thread_locals are gone: this test no longer checks anything";
}

// Each row this torch defines must be exported by the library the row names
// and reached through a dynamic relocation, or interposition cannot work:
// one of libtorch's own, or of libtorch_python's beside it (broadcast_coalesced
// is called from Python's binding alone).
TEST(HookTableEveryBuild, RealLibtorchDefinesAndRelocatesTheRowsForItsRelease) {
  std::string libtorch = FSDPSKIP_LIBTORCH_CPU;
  std::string directory = libtorch.substr(0, libtorch.rfind('/'));
  std::set<std::string> defined = lines_of("nm -D --defined-only --format=just-symbols " + libtorch + " " +
                                           directory + "/libc10.so");
  // A call through the PLT (JUMP_SLOT), a function pointer through the GOT
  // (GLOB_DAT) or a vtable slot (R_X86_64_64, R_AARCH64_ABS64: the gloo
  // broadcast): each architecture's names of the relocations that bind to
  // whichever definition comes first.
  std::set<std::string> relocated = lines_of(
      "readelf -rW " + libtorch + " " + directory + "/libtorch_python.so 2>/dev/null"
      " | awk '$3 ~ /JUMP_SLOT|GLOB_DAT|^R_X86_64_64$|^R_AARCH64_ABS64$/ {print $5}'");
  int present = 0;
  for (int i = 0; i < kHookCount; ++i) {
    const HookRow& hook = kHookRows[i];
    if (!defined.count(hook.mangled)) continue;
    ++present;
    EXPECT_TRUE(relocated.count(hook.mangled)) << hook.id << " is bound inside libtorch: not interposable";
  }
  // zero_, two fill_, copy_, set_requires_grad, set_data and gloo broadcast
  // exist in every supported release; normal_ and uniform_ in one mangling.
  EXPECT_GE(present, 9);
}

}  // namespace
}  // namespace fsdpskip
