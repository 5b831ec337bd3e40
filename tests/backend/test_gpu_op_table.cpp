// The op table (tests/op_cases.h) on the test device: every case of every op the device's files
// registered (test_gpu_matmul.cpp, test_gpu_elementwise.cpp, test_gpu_attention.cpp), compared
// with kernels/ref by memcmp through the one driver (op_table_driver.h).
#include <doctest/doctest.h>

#include "op_table_driver.h"

DETAUDIT_OP_TABLE_TESTS("")
