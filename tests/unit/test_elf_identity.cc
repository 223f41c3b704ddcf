#include "elf_identity.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "../../src/common/plugin_abi.h"

namespace fsdpskip {
namespace {

TEST(ElfIdentity, LoadedLibtorchBuildIdMatchesTheOneReadAtConfigure) {
  ASSERT_NE(dlopen(FSDPSKIP_LIBTORCH_CPU, RTLD_NOW | RTLD_LOCAL), nullptr) << dlerror();
  char path[4096], build_id[128];
  ASSERT_TRUE(loaded_library_identity("libtorch_cpu.so", path, sizeof path, build_id, sizeof build_id));
  EXPECT_STREQ(build_id, FSDPSKIP_TORCH_BUILD_ID);
  EXPECT_FALSE(loaded_library_identity("libnot_loaded_here.so", path, sizeof path, build_id, sizeof build_id));
}

TEST(ElfIdentity, PluginRecordsTheLibtorchItWasBuiltFor) {
  char identity[1024];
  ASSERT_TRUE(read_file_section(FSDPSKIP_PLUGIN, FSDPSKIP_TORCH_ID_SECTION, identity, sizeof identity));
  EXPECT_NE(std::string(identity).find(std::string("build-id=") + FSDPSKIP_TORCH_BUILD_ID + "\n"),
            std::string::npos)
      << identity;
}

TEST(ElfIdentity, BadFilesAreRefusedNotCrashedOn) {
  char out[64];
  EXPECT_FALSE(read_file_section("/nonexistent/plugin.so", ".x", out, sizeof out));
  EXPECT_FALSE(read_file_section("/etc/hostname", ".x", out, sizeof out));
  EXPECT_FALSE(read_file_section(FSDPSKIP_PRELOAD, FSDPSKIP_TORCH_ID_SECTION, out, sizeof out));
  // A truncated copy of the plugin: header present, section table gone.
  std::string truncated = testing::TempDir() + "/truncated.so";
  {
    std::ifstream in(FSDPSKIP_PLUGIN, std::ios::binary);
    std::string head(4096, '\0');
    in.read(&head[0], head.size());
    std::ofstream(truncated, std::ios::binary).write(head.data(), in.gcount());
  }
  EXPECT_FALSE(read_file_section(truncated.c_str(), FSDPSKIP_TORCH_ID_SECTION, out, sizeof out));
}

}  // namespace
}  // namespace fsdpskip
