# Cross-compiling for aarch64 on an x86-64 Debian host (tools/torch-roots:
# the arm64 root): Debian's g++-aarch64-linux-gnu, the root as the sysroot
# (its torch, GoogleTest, libunwind and Python headers and libraries). The
# build runs on the host at native speed; its tests run inside the root,
# under qemu-user.
#   cmake -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DFSDPSKIP_SYSROOT=/path/to/root ...
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT FSDPSKIP_SYSROOT)
  set(FSDPSKIP_SYSROOT "$ENV{FSDPSKIP_SYSROOT}")
endif()
if(NOT IS_DIRECTORY "${FSDPSKIP_SYSROOT}/usr/lib/aarch64-linux-gnu")
  message(FATAL_ERROR "fsdpskip: FSDPSKIP_SYSROOT must name an arm64 Debian root (got '${FSDPSKIP_SYSROOT}')")
endif()
# Try-compiles see it too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FSDPSKIP_SYSROOT)
set(CMAKE_SYSROOT "${FSDPSKIP_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${FSDPSKIP_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Where the linker finds the libraries that the root's libraries need: its
# multiarch directory, and the directories its alternatives point into
# (libblas.so.3 -> /etc/alternatives/... -> /usr/lib/.../blas/libblas.so.3:
# absolute links, which the linker would follow on the host).
set(link_directories "${FSDPSKIP_SYSROOT}/usr/lib/aarch64-linux-gnu")
file(GLOB alternatives "${FSDPSKIP_SYSROOT}/etc/alternatives/*-aarch64-linux-gnu")
foreach(alternative ${alternatives})
  file(READ_SYMLINK "${alternative}" target)
  if(IS_ABSOLUTE "${target}")
    get_filename_component(directory "${FSDPSKIP_SYSROOT}${target}" DIRECTORY)
    list(APPEND link_directories "${directory}")
  endif()
endforeach()
list(REMOVE_DUPLICATES link_directories)
list(JOIN link_directories ":" link_directories)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${link_directories}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${link_directories}")
# No emulator is named: nothing built here runs on the host, and ctest runs
# inside the root, where qemu-user (binfmt_misc) runs them as if natively.
