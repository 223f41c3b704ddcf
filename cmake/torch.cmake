# The LibTorch the plugin and the C++ tests build against, and its identity:
# FSDPSKIP_TORCH_CXX_STANDARD, FSDPSKIP_LIBTORCH_CPU, FSDPSKIP_TORCH_BUILD_ID.
# A Torch_DIR given (a venv's torch) is searched before the system's paths:
# TorchConfig's find_library calls would otherwise pick a system libtorch
# (Debian's libtorch-dev) over the one beside the config.
# Built by pip (scikit-build-core) without a Torch_DIR: the torch of the
# Python that builds, which must be the venv's (--no-build-isolation).
if(SKBUILD AND NOT Torch_DIR)
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_VARIABLE why RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    string(STRIP "${why}" why)
    string(REGEX MATCH "[^\n]*$" why "${why}")  # the exception's line
    message(FATAL_ERROR "fsdpskip: torch is not installed in the Python environment that builds it "
                        "(${Python_EXECUTABLE}: ${why}). Install torch first, then run pip install --no-build-isolation in "
                        "that same environment (without --no-build-isolation pip builds in an isolated environment "
                        "that has no torch).")
  endif()
  set(Torch_DIR "${prefix}/Torch")
endif()
if(Torch_DIR)
  get_filename_component(FSDPSKIP_TORCH_PREFIX "${Torch_DIR}/../../.." ABSOLUTE)
  list(PREPEND CMAKE_PREFIX_PATH "${FSDPSKIP_TORCH_PREFIX}")
endif()
# A LibTorch laid out as PyPI's wheels and LibTorch archives have it
# (include/, lib/, share/cmake/Torch/) is used directly: what its
# TorchConfig.cmake would set (version, include directories, TORCH_CXX_FLAGS)
# is read from it, not run, because a CUDA build's config insists on a CUDA
# toolkit that the plugin, linking libtorch_cpu and libc10 alone, never uses
# (a GPU node's venv often has none). Any other layout (Debian's) goes
# through find_package(Torch).
if(FSDPSKIP_TORCH_PREFIX AND EXISTS "${FSDPSKIP_TORCH_PREFIX}/include/torch/csrc/api/include"
   AND EXISTS "${FSDPSKIP_TORCH_PREFIX}/lib/libtorch_cpu.so"
   AND EXISTS "${Torch_DIR}/TorchConfigVersion.cmake" AND EXISTS "${Torch_DIR}/TorchConfig.cmake")
  file(STRINGS "${Torch_DIR}/TorchConfigVersion.cmake" version_line REGEX "set\\(PACKAGE_VERSION \"[^\"]+\"\\)")
  string(REGEX REPLACE ".*\"([^\"]+)\".*" "\\1" Torch_VERSION "${version_line}")
  file(STRINGS "${Torch_DIR}/TorchConfig.cmake" flags_line REGEX "set\\(TORCH_CXX_FLAGS \"[^\"]*\"\\)")
  string(REGEX REPLACE ".*\"([^\"]*)\".*" "\\1" TORCH_CXX_FLAGS "${flags_line}")
  if(NOT Torch_VERSION MATCHES "^[0-9]+\\.[0-9]+")
    message(FATAL_ERROR "fsdpskip: no version in ${Torch_DIR}/TorchConfigVersion.cmake")
  endif()
  set(TORCH_INSTALL_PREFIX "${FSDPSKIP_TORCH_PREFIX}")
  set(TORCH_INCLUDE_DIRS "${TORCH_INSTALL_PREFIX}/include" "${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include")
  message(STATUS "fsdpskip: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}, used directly (flags: ${TORCH_CXX_FLAGS})")
else()
  find_package(Torch REQUIRED)
endif()

# torch 2.14's headers need C++20; 1.13 and 2.6 build as C++17.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.10)
  set(FSDPSKIP_TORCH_CXX_STANDARD 20)
else()
  set(FSDPSKIP_TORCH_CXX_STANDARD 17)
endif()

# The exact libtorch_cpu.so this build links: its GNU build-id is what the
# preload compares with the loaded one before it loads the plugin. A cross
# build finds it under the sysroot; FSDPSKIP_LIBTORCH_CPU is where it lies
# when the build runs (recorded in the plugin, used by the tests).
find_library(FSDPSKIP_LIBTORCH_CPU_FILE NAMES torch_cpu HINTS ${TORCH_INSTALL_PREFIX}/lib NO_CACHE REQUIRED)
get_filename_component(FSDPSKIP_LIBTORCH_CPU_FILE "${FSDPSKIP_LIBTORCH_CPU_FILE}" REALPATH)
function(fsdpskip_run_time_path variable file)
  set(path "${file}")
  if(CMAKE_SYSROOT)
    string(LENGTH "${CMAKE_SYSROOT}" length)
    string(SUBSTRING "${file}" 0 ${length} prefix)
    if(prefix STREQUAL CMAKE_SYSROOT)
      string(SUBSTRING "${file}" ${length} -1 path)
    endif()
  endif()
  set(${variable} "${path}" PARENT_SCOPE)
endfunction()
fsdpskip_run_time_path(FSDPSKIP_LIBTORCH_CPU "${FSDPSKIP_LIBTORCH_CPU_FILE}")
execute_process(COMMAND readelf -n "${FSDPSKIP_LIBTORCH_CPU_FILE}" OUTPUT_VARIABLE notes RESULT_VARIABLE status
                ERROR_QUIET)  # PyPI's libtorch_cpu: "Gap in build notes" warnings
string(REGEX MATCH "Build ID: ([0-9a-f]+)" match "${notes}")
if(NOT status EQUAL 0 OR NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "cannot read the GNU build-id of ${FSDPSKIP_LIBTORCH_CPU_FILE}: fsdpskip needs it to "
                      "recognise this torch at run time")
endif()
set(FSDPSKIP_TORCH_BUILD_ID ${CMAKE_MATCH_1})
# What a plugin records of it (torch_identity.h), as a C string literal.
set(FSDPSKIP_TORCH_IDENTITY "\"build-id=${FSDPSKIP_TORCH_BUILD_ID}\\ntorch=${Torch_VERSION}\\nlibtorch=${FSDPSKIP_LIBTORCH_CPU}\\n\"")
message(STATUS "fsdpskip: plugin for torch ${Torch_VERSION}, ${FSDPSKIP_LIBTORCH_CPU} (build-id ${FSDPSKIP_TORCH_BUILD_ID})")

# What everything here links: libtorch_cpu and libc10 with torch's headers,
# and nothing of CUDA. A CUDA build's TORCH_LIBRARIES would pull in
# libtorch_cuda, whose NCCL and CUDA runtime the linker must then find (PyPI's
# wheels keep them in other wheels, found through RPATH at run time only).
find_library(FSDPSKIP_LIBC10 NAMES c10 HINTS ${TORCH_INSTALL_PREFIX}/lib NO_CACHE REQUIRED)

# The C++ ABI (_GLIBCXX_USE_CXX11_ABI) libtorch was built with, read off
# libc10's own symbols rather than a line of its CMake files: std::string and
# std::vector<at::Tensor> cross the plugin's calls into torch, and a mismatch
# would build, load and pass the build-id check, then corrupt memory. Which
# symbol tells it: src/common/cxx_abi.h, the doctor's too.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../src/common/cxx_abi.h" abi_symbols
     REGEX "^#define FSDPSKIP_(PRE_)?CXX11_ABI_SYMBOL \"[^\"]+\"$")
foreach(line ${abi_symbols})
  string(REGEX MATCH "^#define (FSDPSKIP_[A-Z0-9_]+) \"([^\"]+)\"$" _ "${line}")
  set(${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
endforeach()
if(NOT FSDPSKIP_CXX11_ABI_SYMBOL OR NOT FSDPSKIP_PRE_CXX11_ABI_SYMBOL)
  message(FATAL_ERROR "fsdpskip: src/common/cxx_abi.h does not name the two ABI symbols")
endif()
file(STRINGS "${FSDPSKIP_LIBC10}" abi_tags REGEX "${FSDPSKIP_PRE_CXX11_ABI_SYMBOL}|${FSDPSKIP_CXX11_ABI_SYMBOL}")
if(abi_tags MATCHES "${FSDPSKIP_CXX11_ABI_SYMBOL}")
  set(FSDPSKIP_TORCH_CXX11_ABI 1)
elseif(abi_tags MATCHES "${FSDPSKIP_PRE_CXX11_ABI_SYMBOL}")
  set(FSDPSKIP_TORCH_CXX11_ABI 0)
else()
  message(FATAL_ERROR "fsdpskip: cannot tell which C++ ABI ${FSDPSKIP_LIBC10} was built with (no "
                      "c10::Device::str() among its symbols): the plugin must be built with the same")
endif()
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])" AND NOT CMAKE_MATCH_1 EQUAL FSDPSKIP_TORCH_CXX11_ABI)
  message(FATAL_ERROR "fsdpskip: ${FSDPSKIP_LIBC10} was built with _GLIBCXX_USE_CXX11_ABI=${FSDPSKIP_TORCH_CXX11_ABI}, "
                      "but its CMake files say ${CMAKE_MATCH_1}")
endif()
message(STATUS "fsdpskip: torch's C++ ABI: _GLIBCXX_USE_CXX11_ABI=${FSDPSKIP_TORCH_CXX11_ABI} (from libc10's symbols)")

add_library(fsdpskip_libtorch_cpu INTERFACE)
target_include_directories(fsdpskip_libtorch_cpu SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_compile_definitions(fsdpskip_libtorch_cpu INTERFACE _GLIBCXX_USE_CXX11_ABI=${FSDPSKIP_TORCH_CXX11_ABI})
target_link_libraries(fsdpskip_libtorch_cpu INTERFACE ${FSDPSKIP_LIBTORCH_CPU_FILE} ${FSDPSKIP_LIBC10})
# A cross build's programs run where the sysroot is /: a libtorch outside the
# system's directories (a venv's torch/lib) is searched for where it lies then.
get_filename_component(directory "${FSDPSKIP_LIBTORCH_CPU}" DIRECTORY)
if(CMAKE_SYSROOT AND NOT directory MATCHES "^/(usr/)?lib(/|64|$)")
  target_link_options(fsdpskip_libtorch_cpu INTERFACE "-Wl,-rpath,${directory}")
endif()
