// The exact dot product and matmul (docs/precision-contract.md, "Matmul").
#include <string>
#include <vector>

#include "kernels/ref/ref.h"
#include "util/error.h"

namespace detaudit::kernels {

using numerics::qvec;
using numerics::QBLOCK;
using numerics::wblock;

namespace {

int64_t n_blocks_of(int64_t n) { return (n + QBLOCK - 1) / QBLOCK; }

void check_qvec(const qvec& x, int64_t n, const char* who) {
  if (x.n != n || x.n_blocks() != n_blocks_of(n) ||
      static_cast<int64_t>(x.q.size()) != x.n_blocks() * QBLOCK) {
    throw input_error(std::string(who) + ": activation has length " + std::to_string(x.n) +
                      ", expected " + std::to_string(n));
  }
}

}  // namespace

void weight_decode_row(gguf::dtype t, const uint8_t* row, int64_t n, wblock* out) {
  numerics::weight_check_type(t);
  (void)gguf::dtype_row_bytes(t, n);  // throws input_error when n is not a multiple of the block size
  const int64_t nb = n_blocks_of(n);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t left = n - b * QBLOCK;
    numerics::weight_decode_block(t, row, b, out[b], left < QBLOCK ? static_cast<int>(left) : QBLOCK);
  }
}

float dot_exact_blocks_ref(const qvec& x, const wblock* w, int64_t n_blocks) {
  if (x.n_blocks() != n_blocks) {
    throw input_error("dot_exact_blocks_ref: activation has " + std::to_string(x.n_blocks()) +
                      " blocks, weight row " + std::to_string(n_blocks));
  }
  const int32_t ew = numerics::wblock_exp_bound(w, n_blocks);
  if (x.max_exp == numerics::EXP_ZERO || ew == numerics::EXP_ZERO) return 0.0f;
  const int32_t g = numerics::dot_grid(x.max_exp, ew, n_blocks);
  int64_t acc = 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    acc += numerics::dot_block_fixed(x.q.data() + b * QBLOCK, x.exp[static_cast<size_t>(b)], w[b], g);
  }
  return numerics::fixed_to_f32(acc, g);
}

float dot_exact_ref(const qvec& x, gguf::dtype t, const uint8_t* row, int64_t n) {
  check_qvec(x, n, "dot_exact_ref");
  std::vector<wblock> w(static_cast<size_t>(n_blocks_of(n)));
  weight_decode_row(t, row, n, w.data());
  return dot_exact_blocks_ref(x, w.data(), static_cast<int64_t>(w.size()));
}

void matmul_exact_ref(const qvec* xs, int64_t n_tokens, gguf::dtype t, const uint8_t* w,
                      int64_t n_in, int64_t n_out, float* y, int64_t row_begin, int64_t row_end) {
  if (row_begin < 0 || row_end > n_out || row_begin > row_end) {
    throw input_error("matmul_exact_ref: row range [" + std::to_string(row_begin) + ", " +
                      std::to_string(row_end) + ") outside [0, " + std::to_string(n_out) + ")");
  }
  for (int64_t tok = 0; tok < n_tokens; ++tok) check_qvec(xs[tok], n_in, "matmul_exact_ref");
  const uint64_t row_bytes = gguf::dtype_row_bytes(t, n_in);
  std::vector<wblock> blocks(static_cast<size_t>(n_blocks_of(n_in)));
  for (int64_t r = row_begin; r < row_end; ++r) {
    weight_decode_row(t, w + static_cast<uint64_t>(r) * row_bytes, n_in, blocks.data());
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
      y[tok * n_out + r] =
          dot_exact_blocks_ref(xs[tok], blocks.data(), static_cast<int64_t>(blocks.size()));
    }
  }
}

}  // namespace detaudit::kernels
