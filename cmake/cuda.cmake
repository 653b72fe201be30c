# cmake/cuda.cmake - the CUDA backend in whet_train, by WHET_CUDA: AUTO builds it where CMake finds nvcc
# (check_language), ON fails the configure without one, OFF leaves it out. One whet binary either way:
# backend.c opens "cuda" devices through backend_cuda_open when WHET_HAVE_CUDA is defined.
#
# The GPU the code is compiled for is CMAKE_CUDA_ARCHITECTURES, by default 90 (H100, H200): a machine
# without a GPU cannot detect one, and each extra architecture costs a full compile of every kernel.
# libFuzzer builds (clang, coverage instrumentation) leave it out under AUTO: nvcc takes no
# -fsanitize, and the fuzz targets reach no device code.
if(WHET_CUDA STREQUAL "OFF" OR (WHET_CUDA STREQUAL "AUTO" AND WHET_FUZZ))
  set(WHET_CUDA_BUILT OFF)
  return()
endif()
if(NOT WHET_CUDA MATCHES "^(AUTO|ON)$")
  message(FATAL_ERROR "WHET_CUDA=${WHET_CUDA}: expected AUTO, ON or OFF")
endif()

include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(WHET_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WHET_CUDA=ON but CMake found no CUDA compiler: install the CUDA toolkit (nvcc on PATH, "
                        "or set CUDACXX=/usr/local/cuda/bin/nvcc), or configure with -DWHET_CUDA=OFF")
  endif()
  message(STATUS "CUDA backend: off (no nvcc found; -DWHET_CUDA=ON makes that an error)")
  set(WHET_CUDA_BUILT OFF)
  return()
endif()

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 20) # designated initializers, as the C op tables use
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
file(GLOB cuda_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/executor/train/backend/cuda/*.cu)
target_sources(whet_train PRIVATE ${cuda_sources})
# whet_train exists before CUDA is enabled, so it takes the architectures here, not from the variable.
set_target_properties(whet_train PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_include_directories(whet_train PRIVATE ${CMAKE_SOURCE_DIR}/executor/train/backend/cuda)
target_compile_definitions(whet_train PRIVATE WHET_HAVE_CUDA)
target_compile_options(whet_train PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
if(WHET_WERROR)
  target_compile_options(whet_train PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
target_link_libraries(whet_train PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt)
# NCCL, the collectives of GPU gangs (executor/train/dist/nccl): where the toolkit has it. Without it a
# rank on a GPU refuses to join a gang of more than one (comm.c says how to get one).
find_path(WHET_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(WHET_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
if(WHET_NCCL_INCLUDE_DIR AND WHET_NCCL_LIBRARY)
  target_sources(whet_dist PRIVATE ${CMAKE_SOURCE_DIR}/executor/train/dist/nccl/comm_nccl.c)
  target_include_directories(whet_dist PRIVATE ${WHET_NCCL_INCLUDE_DIR})
  target_compile_definitions(whet_dist PRIVATE WHET_HAVE_NCCL)
  target_link_libraries(whet_dist PUBLIC CUDA::cudart ${WHET_NCCL_LIBRARY})
  message(STATUS "NCCL: ${WHET_NCCL_LIBRARY}")
else()
  message(STATUS "NCCL: not found (GPU ranks cannot form a gang in this build)")
endif()
set(WHET_CUDA_BUILT ON)
message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
