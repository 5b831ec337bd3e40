# The CUDA backend (included by engine/CMakeLists.txt when DETAUDIT_CUDA=ON).
#
# The kernels (kernels/cuda/*.cu) build in an object library of their own with nvcc flags only:
# -fmad=false and -ffp-contract=off for the host side (no FMA contraction on the exact path, never
# --use_fast_math), and none of detaudit_options' GCC warning flags, which nvcc does not take.
# device.cpp is ordinary C++ in detaudit_kernels (the project's warnings and -Werror apply) and
# talks to the CUDA runtime API; the launches live in the .cu files (kernels/cuda/cuda_internal.h).
# CMAKE_CUDA_ARCHITECTURES defaults to Ampere, Ada and Hopper machine code plus PTX for newer GPUs;
# set it (e.g. -DCMAKE_CUDA_ARCHITECTURES=90) to build fewer.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80-real;89-real;90-real;90-virtual" CACHE STRING "CUDA architectures to build")
endif()
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "Host compiler of nvcc")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

if("${CMAKE_CUDA_FLAGS}" MATCHES "(--use_fast_math|-use_fast_math|-fmad=true|--fmad=true)")
  message(FATAL_ERROR "CMAKE_CUDA_FLAGS contains '${CMAKE_MATCH_1}': it breaks the precision contract "
                      "(docs/precision-contract.md)")
endif()

set(cuda_dir ${CMAKE_CURRENT_SOURCE_DIR}/kernels/cuda)
file(GLOB cuda_kernel_sources CONFIGURE_DEPENDS ${cuda_dir}/*.cu)
add_library(detaudit_cuda_kernels OBJECT ${cuda_kernel_sources})
set_target_properties(detaudit_cuda_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                      CUDA_RUNTIME_LIBRARY Shared)
target_include_directories(detaudit_cuda_kernels PRIVATE ${DETAUDIT_LAYER_INCLUDE}/kernels ${DETAUDIT_LAYER_INCLUDE}/numerics
                           ${DETAUDIT_LAYER_INCLUDE}/gguf ${DETAUDIT_LAYER_INCLUDE}/util)
target_compile_options(detaudit_cuda_kernels PRIVATE -fmad=false -Xcompiler=-ffp-contract=off
                       -Xcompiler=-fno-fast-math)

target_sources(detaudit_kernels PRIVATE ${cuda_dir}/device.cpp $<TARGET_OBJECTS:detaudit_cuda_kernels>)
# The kernel objects make detaudit_kernels a target with CUDA code for CMake: it needs the CUDA
# properties too (it was created before the language was enabled).
set_target_properties(detaudit_kernels PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                      CUDA_STANDARD 17 CUDA_RUNTIME_LIBRARY Shared)
target_link_libraries(detaudit_kernels PRIVATE CUDA::cudart)
target_compile_definitions(detaudit_kernels PUBLIC DETAUDIT_HAVE_CUDA)
