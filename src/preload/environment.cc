// The environment family: setenv, unsetenv, putenv and clearenv forward to
// libc's own, then tell the policy which variable changed. Frameworks set the
// FSDP variables from Python after start-up (os.environ calls setenv and
// unsetenv), torch elastic's function entrypoints set LOCAL_RANK and RANK,
// a script may set FSDPSKIP itself: the decision follows them.
//
// <stdlib.h> is not included: its declarations carry nonnull attributes that
// would let the compiler drop the checks libc's own functions make.
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "environment.h"
#include "libc_next.h"
#include "preload.h"

namespace fsdpskip {
namespace {

using Setenv = int (*)(const char*, const char*, int);
using Unsetenv = int (*)(const char*);
using Putenv = int (*)(char*);
using Clearenv = int (*)();

Setenv g_setenv;
Unsetenv g_unsetenv;
Putenv g_putenv;
Clearenv g_clearenv;

}  // namespace
}  // namespace fsdpskip

using namespace fsdpskip;

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT int setenv(const char* name, const char* value, int overwrite) {
  Setenv original = libc_next("setenv", &g_setenv);
  if (original == nullptr) return errno = ENOSYS, -1;
  int result = original(name, value, overwrite);
  if (result == 0) environment_changed(name, strlen(name), true);
  return result;
}

EXPORT int unsetenv(const char* name) {
  Unsetenv original = libc_next("unsetenv", &g_unsetenv);
  if (original == nullptr) return errno = ENOSYS, -1;
  int result = original(name);
  if (result == 0) environment_changed(name, strlen(name), false);
  return result;
}

// "NAME=value" sets NAME; glibc takes a string without '=' as unsetenv(NAME).
EXPORT int putenv(char* string) {
  Putenv original = libc_next("putenv", &g_putenv);
  if (original == nullptr) return errno = ENOSYS, -1;
  int result = original(string);
  if (result == 0) {
    const char* equals = strchrnul(string, '=');
    environment_changed(string, static_cast<size_t>(equals - string), *equals == '=');
  }
  return result;
}

EXPORT int clearenv() {
  Clearenv original = libc_next("clearenv", &g_clearenv);
  if (original == nullptr) return errno = ENOSYS, -1;
  int result = original();
  if (result == 0) environment_changed(nullptr, 0, false);
  return result;
}
