// The fuzzer's input as a file of its own (a memfd, named through
// /proc/self/fd), for readers that take a descriptor or a path.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

namespace fsdpskip::fuzz {

class File {
 public:
  File(const uint8_t* data, size_t size, const char* suffix = "") {
    fd_ = memfd_create("fuzz", MFD_CLOEXEC);
    for (size_t done = 0; fd_ >= 0 && done < size;) {
      ssize_t wrote = write(fd_, data + done, size - done);
      if (wrote <= 0) break;
      done += wrote;
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
    if (*suffix) {  // readers that look at the name (report: *.json) get a link with one
      named_ = "/tmp/fuzz-" + std::to_string(getpid()) + suffix;
      unlink(named_.c_str());
      if (symlink(path_.c_str(), named_.c_str()) == 0) path_ = named_;
    }
  }
  ~File() {
    if (!named_.empty()) unlink(named_.c_str());
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_, named_;
};

}  // namespace fsdpskip::fuzz
