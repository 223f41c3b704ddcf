# The LibTorch the plugin and the C++ tests build against, and its identity:
# FSDPSKIP_TORCH_CXX_STANDARD, FSDPSKIP_LIBTORCH_CPU, FSDPSKIP_TORCH_BUILD_ID.
find_package(Torch REQUIRED)

# torch 2.14's headers need C++20; 1.13 and 2.6 build as C++17.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.10)
  set(FSDPSKIP_TORCH_CXX_STANDARD 20)
else()
  set(FSDPSKIP_TORCH_CXX_STANDARD 17)
endif()

# The exact libtorch_cpu.so this build links: its GNU build-id is what the
# preload compares with the loaded one before it loads the plugin.
find_library(FSDPSKIP_LIBTORCH_CPU NAMES torch_cpu HINTS ${TORCH_INSTALL_PREFIX}/lib NO_CACHE REQUIRED)
get_filename_component(FSDPSKIP_LIBTORCH_CPU "${FSDPSKIP_LIBTORCH_CPU}" REALPATH)
execute_process(COMMAND readelf -n "${FSDPSKIP_LIBTORCH_CPU}" OUTPUT_VARIABLE notes RESULT_VARIABLE status)
string(REGEX MATCH "Build ID: ([0-9a-f]+)" match "${notes}")
if(NOT status EQUAL 0 OR NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "cannot read the GNU build-id of ${FSDPSKIP_LIBTORCH_CPU}: fsdpskip needs it to "
                      "recognise this torch at run time")
endif()
set(FSDPSKIP_TORCH_BUILD_ID ${CMAKE_MATCH_1})
message(STATUS "fsdpskip: plugin for torch ${Torch_VERSION}, ${FSDPSKIP_LIBTORCH_CPU} (build-id ${FSDPSKIP_TORCH_BUILD_ID})")
