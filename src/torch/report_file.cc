#include "report_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fsdpskip {
namespace {

// A path as a message shows it: whole up to 512 bytes, else its first and
// last 200 around "...", so the line (capped at 4 KiB) keeps its cause.
std::string shown(const std::string& path) {
  return path.size() <= 512 ? path : path.substr(0, 200) + "..." + path.substr(path.size() - 200);
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
        *error += " (known: %r %l %p %h %j %%)";
        return false;
    }
  }
  return true;
}

bool write_atomically(const std::string& path, const std::string& contents, std::string* error) {
  std::string temporary = path + ".partial." + std::to_string(getpid());
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
