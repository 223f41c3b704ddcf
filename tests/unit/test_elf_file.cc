// The common ELF reader (src/common/elf_file.h) on real files, and what the
// preload reads of loaded objects without the dynamic linker
// (src/preload/loaded_objects.h).
#include "../../src/common/elf_file.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "../../src/common/plugin_abi.h"
#include "loaded_objects.h"
#include "plugin_search.h"

namespace fsdpskip {
namespace {

// A copy of `source` that says it is for the other supported architecture.
std::string other_architecture_copy(const char* source, const std::string& name) {
  std::string copy = testing::TempDir() + "/" + name;
  std::ifstream in(source, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint16_t other = kThisMachine == EM_X86_64 ? EM_AARCH64 : EM_X86_64;
  memcpy(&bytes[offsetof(Elf64_Ehdr, e_machine)], &other, sizeof other);
  std::ofstream(copy, std::ios::binary).write(bytes.data(), bytes.size());
  return copy;
}

TEST(ElfFileEveryBuild, LoadedLibtorchBuildIdMatchesTheOneReadAtConfigure) {
  ASSERT_NE(dlopen(FSDPSKIP_LIBTORCH_CPU, RTLD_NOW | RTLD_LOCAL), nullptr) << dlerror();
  char path[4096], build_id[128];
  ASSERT_TRUE(loaded_library_identity("libtorch_cpu.so", path, sizeof path, build_id, sizeof build_id));
  EXPECT_STREQ(build_id, FSDPSKIP_TORCH_BUILD_ID);
  EXPECT_EQ(std::string(path).substr(std::string(path).rfind('/') + 1, 15), "libtorch_cpu.so") << path;
  EXPECT_FALSE(loaded_library_identity("libnot_loaded_here.so", path, sizeof path, build_id, sizeof build_id));
}

TEST(ElfFileEveryBuild, FunctionsAreFoundInTheirLibraryAsTheLinkerFindsThem) {
  void* handle = dlopen(FSDPSKIP_LIBTORCH_CPU, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  const char* prefixes[] = {"libc10.so", "libtorch_cpu.so"};
  LoadedLibrary libraries[8];
  int count = find_loaded_libraries(prefixes, 2, libraries, 8);
  ASSERT_GE(count, 2);
  const char* symbol = "_ZN2at6native5zero_ERNS_6TensorE";
  for (int i = 0; i < count; ++i) {
    void* found = find_function(libraries[i], symbol);
    if (libraries[i].prefix == 1) EXPECT_EQ(found, dlsym(handle, symbol));
    else EXPECT_EQ(found, nullptr) << "libc10 does not define zero_";
  }
  EXPECT_EQ(find_function_anywhere(symbol), dlsym(handle, symbol));
  EXPECT_EQ(find_function_anywhere("no_such_function_anywhere"), nullptr);
  // A data symbol is no function, nor is an IFUNC's resolver (memcpy);
  // of a function with several versions (dlsym), the default one.
  EXPECT_EQ(find_function_anywhere("_r_debug"), nullptr);
#ifndef FSDPSKIP_SANITIZED  // ASan's runtime, preloaded, defines a memcpy of its own
  EXPECT_EQ(find_function_anywhere("memcpy"), nullptr);
#endif
  EXPECT_EQ(find_function_anywhere("fork"), dlsym(RTLD_DEFAULT, "fork"));
  EXPECT_EQ(find_function_anywhere("dlsym"), dlsym(RTLD_DEFAULT, "dlsym"));
}

// The GOT slots through which libtorch_cpu calls its own exported
// CPUGeneratorImpl::random: found from its relocations, each holding what
// the linker bound it to (here, without a preload, torch's definition).
TEST(ElfFileEveryBuild, CallSlotsAreTheLibrarysOwnBindings) {
  void* handle = dlopen(FSDPSKIP_LIBTORCH_CPU, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  const char* prefix = "libtorch_cpu.so";
  LoadedLibrary library;
  ASSERT_EQ(find_loaded_libraries(&prefix, 1, &library, 1), 1);
  for (const char* symbol : {"_ZN2at16CPUGeneratorImpl6randomEv", "_ZN2at16CPUGeneratorImpl8random64Ev"}) {
    void** slots[8];
    int count = find_call_slots(library, symbol, slots, 8);
    ASSERT_GE(count, 1) << symbol << ": libtorch_cpu calls it through its PLT (the draw rows rest on it)";
    for (int i = 0; i < count; ++i) EXPECT_EQ(*slots[i], dlsym(handle, symbol)) << symbol << " slot " << i;
  }
  void** slots[8];
  EXPECT_EQ(find_call_slots(library, "no_such_function_anywhere", slots, 8), 0);
}

// Another thread loads and unloads a library (its tables mapped and
// unmapped) while this one looks up functions in every object: no fault,
// and every answer is right or absent.
TEST(ElfFile, LookupsRaceDlopenAndDlcloseSafely) {
  std::atomic<bool> done{false};
  std::atomic<int> cycles{0};
  std::thread churn([&] {
    while (!done) {
      void* handle = dlopen(FSDPSKIP_CHURN_LIBRARY, RTLD_NOW | RTLD_LOCAL);
      if (handle) dlclose(handle);
      ++cycles;
    }
  });
  void* stable = dlsym(RTLD_DEFAULT, "fork");
  int found = 0;
  for (int i = 0; i < 3000; ++i) {
    EXPECT_EQ(find_function_anywhere("fork"), stable);
    // Unmapped again by now, perhaps: only that it was read without a fault.
    found += find_function_anywhere("churn_library_function") != nullptr;
    char path[4096], build_id[128];
    loaded_library_identity("libchurn", path, sizeof path, build_id, sizeof build_id);
  }
  done = true;
  churn.join();
  EXPECT_GT(cycles.load(), 10) << "the library was hardly loaded: the test proved little";
  RecordProperty("found_while_loaded", found);
}

TEST(ElfFileEveryBuild, PluginRecordsTheLibtorchItWasBuiltFor) {
  char identity[1024];
  ElfFile plugin(FSDPSKIP_PLUGIN);
  ASSERT_EQ(plugin.problem_here(), nullptr);
  ASSERT_TRUE(plugin.section_text(FSDPSKIP_TORCH_ID_SECTION, identity, sizeof identity));
  EXPECT_NE(std::string(identity).find(std::string("build-id=") + FSDPSKIP_TORCH_BUILD_ID + "\n"), std::string::npos)
      << identity;
}

TEST(ElfFile, BadFilesAreRefusedNotCrashedOn) {
  char out[64];
  EXPECT_STRNE(ElfFile("/nonexistent/plugin.so").problem(), nullptr);
  EXPECT_STREQ(ElfFile("/etc/hostname").problem(), "is not an ELF file");
  EXPECT_STREQ(ElfFile("/dev/null").problem(), "is not a regular file");
  EXPECT_FALSE(ElfFile(FSDPSKIP_PRELOAD).section_text(FSDPSKIP_TORCH_ID_SECTION, out, sizeof out));
  // A truncated copy of the plugin: header present, section table gone.
  std::string truncated = testing::TempDir() + "/truncated.so";
  {
    std::ifstream in(FSDPSKIP_PLUGIN, std::ios::binary);
    std::string head(4096, '\0');
    in.read(&head[0], head.size());
    std::ofstream(truncated, std::ios::binary).write(head.data(), in.gcount());
  }
  ElfFile cut(truncated.c_str());
  EXPECT_STREQ(cut.problem(), "is truncated (its section table runs past the end)");
  EXPECT_FALSE(cut.section_text(FSDPSKIP_TORCH_ID_SECTION, out, sizeof out));
  std::remove(truncated.c_str());
}

TEST(ElfFile, AFileOfAnotherArchitectureIsOneClauseAndAPluginOfOneIsRefused) {
  std::string copy = other_architecture_copy(FSDPSKIP_PLUGIN, "other-architecture.so");
  ElfFile other(copy.c_str());
  ASSERT_EQ(other.problem(), nullptr) << "an ELF file of another machine is still readable";
  const std::string expected = kThisMachine == EM_X86_64 ? "is built for AArch64; this fsdpskip runs on x86-64"
                                                         : "is built for x86-64; this fsdpskip runs on AArch64";
  EXPECT_EQ(other.problem_here(), expected);
  PluginExamination examined = examine_plugin(copy.c_str(), FSDPSKIP_TORCH_BUILD_ID, 0);
  EXPECT_EQ(examined.verdict, PluginVerdict::kOtherArchitecture) << examined.detail;
  EXPECT_EQ(std::string(examined.detail), copy + " " + expected);
  std::remove(copy.c_str());
}

}  // namespace
}  // namespace fsdpskip
