// main() for tests that share process-wide state (the tracker's table, the
// policy, the generators): each test runs in a child forked after the
// libraries are loaded, so it starts from the state a fresh process has, and
// loading libtorch (seconds per process under qemu-user) is paid once.
// GoogleTest's own flags and GTEST_FILTER choose the tests, as usual; a
// child that fails, dies by a signal or runs past kSecondsPerTest fails its
// test by name.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr unsigned kSecondsPerTest = 300;  // a deadlock fails its test, not the whole entry

std::vector<std::string> selected_tests() {
  std::vector<std::string> names;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t)
      if (suite.GetTestInfo(t)->should_run())
        names.push_back(std::string(suite.name()) + "." + suite.GetTestInfo(t)->name());
  }
  return names;
}

// The failure of one child, or "" when it passed.
std::string outcome(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 0 ? "" : "failed";
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    return "ran past " + std::to_string(kSecondsPerTest) + " s";
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "ended oddly";
}

}  // namespace

int main(int argc, char** argv) {
  GTEST_FLAG_SET(brief, true);  // a passing test prints its count alone, unless the flags say otherwise
  testing::InitGoogleTest(&argc, argv);
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();
  // A listing decides which tests the flags select (should_run), and runs none.
  fflush(stdout);
  int saved_stdout = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY);
  dup2(null, STDOUT_FILENO);
  GTEST_FLAG_SET(list_tests, true);
  int listed = RUN_ALL_TESTS();
  GTEST_FLAG_SET(list_tests, false);
  fflush(stdout);
  dup2(saved_stdout, STDOUT_FILENO);
  close(saved_stdout);
  close(null);
  if (listed != 0) return 1;
  std::vector<std::string> names = selected_tests();
  if (names.empty()) return fprintf(stderr, "no test matches the filter '%s'\n", GTEST_FLAG_GET(filter).c_str()), 1;

  signal(SIGCHLD, SIG_DFL);  // an ignored SIGCHLD, inherited, would leave no child to wait for
  std::vector<std::string> failures;
  for (const std::string& name : names) {
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child < 0) return perror("fork"), 1;
    if (child == 0) {
      alarm(kSecondsPerTest);
      GTEST_FLAG_SET(filter, name);
      // The listing applied the shard; the one test named runs here whatever its index.
      unsetenv("GTEST_TOTAL_SHARDS");
      unsetenv("GTEST_SHARD_INDEX");
      int failed = RUN_ALL_TESTS();
      fflush(stdout);
      _exit(failed);
    }
    int status = 0;
    pid_t waited;
    while ((waited = waitpid(child, &status, 0)) < 0 && errno == EINTR) {}
    std::string failure = waited == child ? outcome(status) : std::string("not waited for: ") + strerror(errno);
    if (!failure.empty()) failures.push_back(name + ": " + failure);
  }
  printf("\n%zu tests, each in a process of its own: %zu passed, %zu did not\n", names.size(),
         names.size() - failures.size(), failures.size());
  for (const std::string& failure : failures) printf("  %s\n", failure.c_str());
  return failures.empty() ? 0 : 1;
}
