// Where the preload looks for a plugin, and which files it refuses before
// loading anything: against the real plugin of this build and real files.
#include "plugin_search.h"
#include "requirement.h"

#include "../../src/common/install_layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace fsdpskip {
namespace {

namespace fs = std::filesystem;

// A private directory with a copy of this build's plugin in it.
class PluginCopy : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir() + "/plugin-search.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
    chmod(directory_.c_str(), 0755);
    plugin_ = directory_ + "/" + kPluginFileName;
    fs::copy_file(FSDPSKIP_PLUGIN, plugin_);
    chmod(plugin_.c_str(), 0644);
  }
  void TearDown() override { fs::remove_all(directory_); }
  PluginExamination examine(const std::string& path, const char* build_id = FSDPSKIP_TORCH_BUILD_ID) {
    return examine_plugin(path.c_str(), build_id, geteuid());
  }
  std::string directory_, plugin_;
};

TEST(PluginSearch, OrderIsBesideThenInstallThenCache) {
  PluginCandidate found[kMaxPluginCandidates];
  ASSERT_EQ(plugin_candidates(nullptr, "/opt/fsdpskip/lib/libfsdpskip.so", "/home/u/.cache/fsdpskip/plugins", "abc",
                              found),
            3);
  EXPECT_EQ(found[0].place, PluginPlace::kBeside);
  EXPECT_STREQ(found[0].path, "/opt/fsdpskip/lib/libfsdpskip_torch.so");
  EXPECT_EQ(found[1].place, PluginPlace::kInstall);
  EXPECT_STREQ(found[1].path, "/opt/fsdpskip/lib/fsdpskip/plugins/abc/libfsdpskip_torch.so");
  EXPECT_EQ(found[2].place, PluginPlace::kCache);
  EXPECT_STREQ(found[2].path, "/home/u/.cache/fsdpskip/plugins/abc/libfsdpskip_torch.so");
}

TEST(InstallLayout, EveryPartLeadsBackToItsRoot) {
  for (InstallPart part : {InstallPart::kPreload, InstallPart::kPlugin, InstallPart::kPlugins, InstallPart::kCommand,
                           InstallPart::kCppProbe, InstallPart::kPythonProbe, InstallPart::kSources}) {
    char path[4096], root[4096];
    ASSERT_TRUE(install_path("/opt/fsdpskip/0.1.0", part, path, sizeof path));
    EXPECT_EQ(std::string(path).rfind("/opt/fsdpskip/0.1.0/", 0), 0u) << path;
    ASSERT_TRUE(install_root(path, part, root, sizeof root)) << path;
    EXPECT_STREQ(root, "/opt/fsdpskip/0.1.0") << path;
  }
  char path[16];
  EXPECT_FALSE(install_path("/a/very/long/root", InstallPart::kCommand, path, sizeof path)) << "cut: another file";
}

TEST(InstallLayout, APreloadFindsItsPluginBesideItInAnyDirectory) {
  char path[4096];
  ASSERT_TRUE(install_path_of_preload("/tmp/copied/libfsdpskip.so", InstallPart::kPlugin, path, sizeof path));
  EXPECT_STREQ(path, "/tmp/copied/libfsdpskip_torch.so");
  ASSERT_TRUE(install_path_of_preload("/opt/fs/lib/libfsdpskip.so", InstallPart::kPlugins, path, sizeof path));
  EXPECT_STREQ(path, "/opt/fs/lib/fsdpskip/plugins");
  ASSERT_TRUE(install_path_of_preload("/opt/fs/lib/libfsdpskip.so", InstallPart::kCommand, path, sizeof path));
  EXPECT_STREQ(path, "/opt/fs/bin/fsdpskip");
}

TEST(PluginSearch, TheVariableIsTheOnlyPlaceWhenSet) {
  PluginCandidate found[kMaxPluginCandidates];
  ASSERT_EQ(plugin_candidates("/x/p.so", "/opt/lib/libfsdpskip.so", "/c", "abc", found), 1);
  EXPECT_EQ(found[0].place, PluginPlace::kVariable);
  EXPECT_STREQ(found[0].path, "/x/p.so");
  // Set but empty: as if unset; no cache directory: no cache place.
  EXPECT_EQ(plugin_candidates("", "/opt/lib/libfsdpskip.so", "", "abc", found), 2);
}

TEST(PluginSearch, CacheFollowsXdgThenHomeAndOnlyAbsolutePaths) {
  char out[PATH_MAX];
  cache_plugin_directory("/xdg", "/home/u", out, sizeof out);
  EXPECT_STREQ(out, "/xdg/fsdpskip/plugins");
  cache_plugin_directory("relative", "/home/u", out, sizeof out);
  EXPECT_STREQ(out, "/home/u/.cache/fsdpskip/plugins");
  cache_plugin_directory(nullptr, "", out, sizeof out);
  EXPECT_STREQ(out, "");
}

TEST(PluginSearch, PathsThatDoNotFitAreLeftOutNotCut) {
  std::string deep = "/" + std::string(PATH_MAX - 10, 'd');
  PluginCandidate found[kMaxPluginCandidates];
  int count = plugin_candidates(nullptr, "/opt/lib/libfsdpskip.so", deep.c_str(), "abc", found);
  EXPECT_EQ(count, 2);  // beside and install; the cache path would be longer than PATH_MAX
  for (int i = 0; i < count; ++i) EXPECT_NE(found[i].place, PluginPlace::kCache);
}

TEST_F(PluginCopy, ThisBuildsPluginMatchesItsTorch) {
  PluginExamination result = examine(plugin_);
  EXPECT_EQ(result.verdict, PluginVerdict::kMatch) << result.detail;
  EXPECT_STREQ(result.build_id, FSDPSKIP_TORCH_BUILD_ID);
}

TEST_F(PluginCopy, AnotherTorchsBuildIdIsRefused) {
  PluginExamination result = examine(plugin_, "00000000000000000000000000000000deadbeef");
  EXPECT_EQ(result.verdict, PluginVerdict::kOtherTorch);
  EXPECT_NE(std::string(result.detail).find(FSDPSKIP_TORCH_BUILD_ID), std::string::npos) << result.detail;
}

TEST_F(PluginCopy, AFileOthersCanWriteIsRefused) {
  chmod(plugin_.c_str(), 0666);
  PluginExamination result = examine(plugin_);
  EXPECT_EQ(result.verdict, PluginVerdict::kUnsafe);
  EXPECT_NE(std::string(result.detail).find("is writable by others"), std::string::npos) << result.detail;
}

TEST_F(PluginCopy, ADirectoryOthersCanWriteIsRefusedUnlessSticky) {
  chmod(directory_.c_str(), 0777);
  PluginExamination result = examine(plugin_);
  EXPECT_EQ(result.verdict, PluginVerdict::kUnsafe);
  EXPECT_NE(std::string(result.detail).find("directory " + fs::canonical(directory_).string()), std::string::npos)
      << result.detail;
  chmod(directory_.c_str(), 01777);  // /tmp's mode: other users cannot replace our entries
  EXPECT_EQ(examine(plugin_).verdict, PluginVerdict::kMatch) << examine(plugin_).detail;
}

TEST_F(PluginCopy, AnUnsafeDirectoryFurtherUpIsRefused) {
  std::string nested = directory_ + "/a/b";
  fs::create_directories(nested);
  chmod((directory_ + "/a").c_str(), 0777);  // two levels above the plugin
  chmod(nested.c_str(), 0755);
  fs::copy_file(plugin_, nested + "/" + kPluginFileName);
  PluginExamination result = examine(nested + "/" + kPluginFileName);
  EXPECT_EQ(result.verdict, PluginVerdict::kUnsafe);
  EXPECT_NE(std::string(result.detail).find("/a is writable by others"), std::string::npos) << result.detail;
}

TEST_F(PluginCopy, ALinkIsFollowedOnlyThroughSafeDirectories) {
  std::string open_space = directory_ + "/shared", link = open_space + "/plugins";
  fs::create_directories(open_space);
  fs::create_directory_symlink(directory_, directory_ + "/safe-link");
  // A link in a safe directory to a safe place: the plugin it leads to is loaded.
  PluginExamination through_safe = examine(directory_ + "/safe-link/" + kPluginFileName);
  EXPECT_EQ(through_safe.verdict, PluginVerdict::kMatch) << through_safe.detail;
  EXPECT_EQ(std::string(through_safe.path), directory_ + "/safe-link/" + kPluginFileName);
  // The same link in a directory everyone can write: anyone could re-point it.
  fs::create_directory_symlink(directory_, link);
  chmod(open_space.c_str(), 0777);
  PluginExamination through_open = examine(link + "/" + kPluginFileName);
  EXPECT_EQ(through_open.verdict, PluginVerdict::kUnsafe);
  EXPECT_NE(std::string(through_open.detail).find("shared is writable by others"), std::string::npos)
      << through_open.detail;
}

TEST_F(PluginCopy, ARelativePathIsTheCurrentDirectorysNeverASearch) {
  char before[PATH_MAX];
  ASSERT_NE(getcwd(before, sizeof before), nullptr);
  ASSERT_EQ(chdir(directory_.c_str()), 0);
  PluginExamination result = examine(kPluginFileName);  // no '/': dlopen would search LD_LIBRARY_PATH
  ASSERT_EQ(chdir(before), 0);
  EXPECT_EQ(result.verdict, PluginVerdict::kMatch) << result.detail;
  EXPECT_EQ(std::string(result.path), fs::canonical(directory_).string() + "/" + kPluginFileName);
}

TEST_F(PluginCopy, GroupWriteIsRefusedUnlessTheGroupIsTheUsersOwn) {
  FSDPSKIP_REQUIRE("root", geteuid() == 0, "changing a file's group needs root");
  chmod(plugin_.c_str(), 0664);
  ASSERT_EQ(chown(plugin_.c_str(), 0, 65534), 0);  // group nogroup: other users
  PluginExamination shared = examine(plugin_);
  EXPECT_EQ(shared.verdict, PluginVerdict::kUnsafe);
  EXPECT_NE(std::string(shared.detail).find("is writable by its group"), std::string::npos) << shared.detail;
  ASSERT_EQ(chown(plugin_.c_str(), geteuid(), getegid()), 0);  // a private group (uid = gid), umask 002's files
  if (getegid() == geteuid()) EXPECT_EQ(examine(plugin_).verdict, PluginVerdict::kMatch) << examine(plugin_).detail;
}

TEST_F(PluginCopy, AFileOfAnotherOwnerIsRefused) {
  FSDPSKIP_REQUIRE("root", geteuid() == 0, "changing a file's owner needs root");
  ASSERT_EQ(chown(plugin_.c_str(), 65534, 65534), 0);  // nobody
  PluginExamination result = examine(plugin_);
  EXPECT_EQ(result.verdict, PluginVerdict::kUnsafe);
  EXPECT_NE(std::string(result.detail).find("owned by another user"), std::string::npos) << result.detail;
  // Unless that user owns the install itself (it controls the preload anyway).
  EXPECT_EQ(examine_plugin(plugin_.c_str(), FSDPSKIP_TORCH_BUILD_ID, 65534).verdict, PluginVerdict::kMatch);
}

TEST_F(PluginCopy, AFifoADirectoryAndAnEmptyFileAreRefusedWithoutBlocking) {
  std::string fifo = directory_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(examine(fifo).verdict, PluginVerdict::kUnsafe);  // opened without blocking: no writer needed
  EXPECT_EQ(examine(directory_).verdict, PluginVerdict::kUnsafe);
  EXPECT_EQ(examine("/dev/zero").verdict, PluginVerdict::kUnsafe);
  std::string empty = directory_ + "/empty.so";
  fclose(fopen(empty.c_str(), "w"));
  chmod(empty.c_str(), 0644);
  EXPECT_EQ(examine(empty).verdict, PluginVerdict::kNotPlugin);
  EXPECT_EQ(examine(directory_ + "/absent.so").verdict, PluginVerdict::kMissing);
}

TEST_F(PluginCopy, APluginOfAnotherAbiIsRefusedBeforeLoading) {
  std::string identity = directory_ + "/identity";
  FILE* f = fopen(identity.c_str(), "w");
  fprintf(f, "build-id=%s\ntorch=x\nlibtorch=/x\nabi=4\n", FSDPSKIP_TORCH_BUILD_ID);
  fclose(f);
  std::string command = "objcopy --update-section .fsdpskip_torch_id=" + identity + " " + plugin_;
  ASSERT_EQ(system(command.c_str()), 0);
  chmod(plugin_.c_str(), 0644);
  PluginExamination result = examine(plugin_);
  EXPECT_EQ(result.verdict, PluginVerdict::kOtherAbi);
  EXPECT_NE(std::string(result.detail).find("plugin ABI 4"), std::string::npos) << result.detail;
}

}  // namespace
}  // namespace fsdpskip
