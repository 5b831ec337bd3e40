// The exact matmul with 4x8-bit integer dot products (VK_KHR_shader_integer_dot_product): integer
// block weight types on devices that have them; the same bits as matmul.comp.
#version 450
#define MATMUL_DOT8 1
#include "exact.glsl"
#include "matmul.glsl"
