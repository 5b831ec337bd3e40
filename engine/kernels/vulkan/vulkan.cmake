# The Vulkan backend (included by engine/CMakeLists.txt when DETAUDIT_VULKAN=ON): its host sources,
# its compute shaders compiled to SPIR-V by glslc at build time, and the SPIR-V embedded into one
# generated source file (SHADERS, kernels/vulkan/vk_internal.h) so the binary needs no shader
# files at run time.
find_package(Vulkan REQUIRED)
find_program(DETAUDIT_GLSLC glslc)
if(NOT DETAUDIT_GLSLC)
  message(FATAL_ERROR "DETAUDIT_VULKAN=ON needs glslc (the shaderc GLSL compiler) to compile the "
                      "compute shaders: install shaderc (Debian: apt install glslc) or set DETAUDIT_GLSLC")
endif()

set(vk_dir ${CMAKE_CURRENT_SOURCE_DIR}/kernels/vulkan)
set(vk_out ${CMAKE_CURRENT_BINARY_DIR}/vulkan_shaders)
file(MAKE_DIRECTORY ${vk_out})
file(GLOB vk_host_sources CONFIGURE_DEPENDS ${vk_dir}/*.cpp)
file(GLOB vk_shader_sources CONFIGURE_DEPENDS ${vk_dir}/shaders/*.comp)
file(GLOB vk_shader_headers CONFIGURE_DEPENDS ${vk_dir}/shaders/*.glsl)

# contract.glsl: the precision contract's constants and the weight type ids, written by a host
# tool from numerics/contract.h and gguf/weight_types.h (exact.glsl and wblock.glsl include it),
# so the shaders hold no copy of them.
add_executable(detaudit_glsl_constants ${vk_dir}/gen/glsl_constants.cpp)
target_include_directories(detaudit_glsl_constants PRIVATE ${DETAUDIT_LAYER_INCLUDE}/numerics)
target_link_libraries(detaudit_glsl_constants PRIVATE detaudit_options detaudit_gguf)
set(vk_contract ${vk_out}/contract.glsl)
add_custom_command(
  OUTPUT ${vk_contract}
  COMMAND detaudit_glsl_constants ${vk_contract}
  DEPENDS detaudit_glsl_constants
  COMMENT "writing the contract's constants into contract.glsl"
  VERBATIM)

# Every shader depends on every header (they all include exact.glsl). Shader warnings are errors
# in -DDETAUDIT_WERROR=ON builds, like the C++ ones.
set(vk_glslc_flags --target-env=vulkan1.2 -O)
if(DETAUDIT_WERROR)
  list(APPEND vk_glslc_flags -Werror)
endif()
set(vk_spv_files "")
foreach(comp ${vk_shader_sources})
  get_filename_component(name ${comp} NAME_WE)
  set(spv ${vk_out}/${name}.spv)
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${DETAUDIT_GLSLC} ${vk_glslc_flags} -I ${vk_dir}/shaders -I ${vk_out} ${comp} -o ${spv}
    DEPENDS ${comp} ${vk_shader_headers} ${vk_contract}
    COMMENT "glslc ${name}.comp"
    VERBATIM)
  list(APPEND vk_spv_files ${spv})
endforeach()

string(REPLACE ";" "|" vk_spv_arg "${vk_spv_files}")
set(vk_embedded ${vk_out}/vk_shaders_embedded.cpp)
add_custom_command(
  OUTPUT ${vk_embedded}
  COMMAND ${CMAKE_COMMAND} "-DSPV_FILES=${vk_spv_arg}" -DOUT=${vk_embedded} -P ${vk_dir}/embed_spirv.cmake
  DEPENDS ${vk_spv_files} ${vk_dir}/embed_spirv.cmake
  COMMENT "embedding SPIR-V into vk_shaders_embedded.cpp"
  VERBATIM)

target_sources(detaudit_kernels PRIVATE ${vk_host_sources} ${vk_embedded})
target_link_libraries(detaudit_kernels PUBLIC Vulkan::Vulkan)
target_compile_definitions(detaudit_kernels PUBLIC DETAUDIT_HAVE_VULKAN)
