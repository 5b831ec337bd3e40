// The exact matmul with plain 32-bit integer products: every weight type, every device.
#version 450
#include "exact.glsl"
#include "matmul.glsl"
