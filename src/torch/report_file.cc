#include "report_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../common/report_template.h"

namespace fsdpskip {
namespace {

// A path as a message shows it: whole up to 512 bytes, else its first and
// last 200 around "...", so the line (capped at 4 KiB) keeps its cause.
std::string shown(const std::string& path) {
  return path.size() <= 512 ? path : path.substr(0, 200) + "..." + path.substr(path.size() - 200);
}

// The directories above `path` that do not exist yet, made one component
// at a time as `mkdir -p` does (mode 0777 less the umask): a job's ranks
// may all reach here at once, so a component another rank made meanwhile
// (EEXIST) is no failure, unless it is not a directory. Components that
// exist are followed as any path is; only the report's own name never is.
bool make_parent_directories(const std::string& path, std::string* error) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return true;
  std::string directory = path.substr(0, slash);
  struct stat status;
  if (stat(directory.c_str(), &status) == 0 && S_ISDIR(status.st_mode)) return true;  // the usual case
  for (size_t end = 1; end <= directory.size(); ++end) {
    if (end < directory.size() && directory[end] != '/') continue;
    if (directory[end - 1] == '/') continue;  // "a//b"
    std::string component = directory.substr(0, end);
    if (mkdir(component.c_str(), 0777) == 0) continue;
    int cause = errno;
    if (cause == EEXIST && stat(component.c_str(), &status) == 0 && S_ISDIR(status.st_mode)) continue;
    *error = "cannot create directory " + shown(component) + ": " + strerror(cause == EEXIST ? ENOTDIR : cause);
    return false;
  }
  return true;
}

}  // namespace

bool expand_report_path(const std::string& path_template, const ReportContext& context, std::string* path,
                        std::string* error) {
  path->clear();
  for (size_t i = 0; i < path_template.size(); ++i) {
    if (path_template[i] != '%') {
      *path += path_template[i];
      continue;
    }
    switch (++i < path_template.size() ? path_template[i] : '\0') {
      case 'r': *path += std::to_string(context.host->rank); break;
      case 'l': *path += std::to_string(context.host->local_rank); break;
      case 'p': *path += std::to_string(context.pid); break;
      case 'h': *path += context.hostname; break;
      case 'j': *path += getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "nojob"; break;
      case '%': *path += '%'; break;
      default:
        *error = i < path_template.size() ? std::string("unknown sequence %") + path_template[i]
                                          : std::string("a % at the end");
        *error += " (known:";
        for (const ReportSequence& sequence : kReportSequences) (*error += " %") += sequence.letter;
        *error += ")";
        return false;
    }
  }
  return true;
}

bool write_atomically(const std::string& path, const std::string& contents, std::string* error) {
  std::string temporary = path + ".partial." + std::to_string(getpid());
  // Too long for the kernel: said before a directory is made for it.
  if (temporary.size() >= PATH_MAX) {
    *error = "cannot create " + shown(temporary) + ": " + strerror(ENAMETOOLONG);
    return false;
  }
  if (!make_parent_directories(path, error)) return false;
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "cannot create " + shown(temporary) + ": " + strerror(errno);
    return false;
  }
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += n;
  }
  bool ok = close(fd) == 0 && written == contents.size();
  if (ok && rename(temporary.c_str(), path.c_str()) == 0) return true;
  *error = "cannot write " + shown(path) + ": " + strerror(errno);
  unlink(temporary.c_str());
  return false;
}

}  // namespace fsdpskip
