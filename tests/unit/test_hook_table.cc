// The hook table against the built preload and the real libtorch.
#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "environment.h"
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
    if (g_hooks[i].library == Library::kNccl) {
      EXPECT_EQ(std::string(g_hooks[i].mangled).rfind("nccl", 0), 0u) << g_hooks[i].mangled;
      continue;
    }
    std::string name = demangle(g_hooks[i].mangled);
    ASSERT_FALSE(name.empty()) << g_hooks[i].mangled;
    EXPECT_TRUE(name.rfind("at::native::", 0) == 0 || name.rfind("at::TensorBase::", 0) == 0 ||
                name.rfind("c10::", 0) == 0 || name.rfind("c10d::", 0) == 0)
        << name;
  }
}

TEST(HookTable, NamesAreUnique) {
  std::set<std::string> mangled, ids;
  for (int i = 0; i < kHookCount; ++i) {
    EXPECT_TRUE(mangled.insert(g_hooks[i].mangled).second) << g_hooks[i].mangled;
    EXPECT_TRUE(ids.insert(g_hooks[i].id).second) << g_hooks[i].id;
  }
}

TEST(HookTable, PreloadExportsExactlyTheTable) {
  std::set<std::string> exported =
      lines_of(std::string("nm -D --defined-only --format=just-symbols ") + FSDPSKIP_PRELOAD);
  std::set<std::string> expected;
  for (int i = 0; i < kHookCount; ++i) expected.insert(g_hooks[i].mangled);
  expected.insert(std::begin(kEnvironmentFunctions), std::end(kEnvironmentFunctions));
  EXPECT_EQ(exported, expected);
}

TEST(HookTable, PreloadNeedsGlibcAlone) {
#ifdef FSDPSKIP_SANITIZED
  GTEST_SKIP() << "a sanitized build needs the sanitizer's runtime too";
#endif
  std::set<std::string> needed = lines_of(std::string("readelf -d ") + FSDPSKIP_PRELOAD +
                                          " | sed -n 's/.*(NEEDED).*\\[\\(.*\\)\\]/\\1/p'");
  ASSERT_FALSE(needed.empty());
  const std::set<std::string> glibc = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6",
                                       "ld-linux-x86-64.so.2"};
  for (const std::string& library : needed) EXPECT_TRUE(glibc.count(library)) << library << " is not glibc";
}

// Each row this torch defines must be exported by the library the row names
// and reached through a dynamic relocation, or interposition cannot work.
TEST(HookTable, RealLibtorchDefinesAndRelocatesTheRowsForItsRelease) {
  std::string libtorch = FSDPSKIP_LIBTORCH_CPU;
  std::string directory = libtorch.substr(0, libtorch.rfind('/'));
  std::set<std::string> defined = lines_of("nm -D --defined-only --format=just-symbols " + libtorch + " " +
                                           directory + "/libc10.so");
  std::set<std::string> relocated =
      lines_of("readelf -rW " + libtorch + " | awk '$3 ~ /JUMP_SLOT|GLOB_DAT|R_X86_64_64/ {print $5}'");
  int present = 0;
  for (int i = 0; i < kHookCount; ++i) {
    const Hook& hook = g_hooks[i];
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
