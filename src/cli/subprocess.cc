#include "subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace fsdpskip::cli {

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Finished run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& set,
                     const std::string& scratch_directory, int timeout_seconds) {
  Finished finished;
  std::string out_path = scratch_directory + "/stdout", err_path = scratch_directory + "/stderr";
  pid_t child = fork();
  if (child < 0) return finished;
  if (child == 0) {
    for (const auto& [name, value] : set) value.empty() ? unsetenv(name.c_str()) : setenv(name.c_str(), value.c_str(), 1);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(127);
    std::vector<char*> args;
    for (const std::string& argument : argv) args.push_back(const_cast<char*>(argument.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    dprintf(2, "cannot run %s\n", args[0]);
    _exit(127);
  }
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int status = 0;
  for (;;) {
    pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > timeout_seconds) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      finished.timed_out = true;
      break;
    }
    usleep(20000);
  }
  finished.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  finished.out = read_whole_file(out_path);
  finished.err = read_whole_file(err_path);
  return finished;
}

}  // namespace fsdpskip::cli
