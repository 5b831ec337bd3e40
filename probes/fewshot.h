// lm-evaluation-harness's few-shot draw: which exemplars each document of a task gets.
//
// lm-eval's default sampler keeps one Python `random.Random(seed)` (the fewshot seed, 1234 unless
// told otherwise) for the whole task and calls `rnd.sample(fewshot_docs, k)` once per document, in
// document order; exemplars equal to the document itself are dropped (k + 1 are drawn when the
// few-shot split is the test split). So document 0 of GSM8K (train split of 7473) gets train
// lines 6374, 3610, 957, 61, 742, and the draws of document 5 depend on documents 0-4 having
// been drawn first. py_random reproduces CPython's Mersenne Twister, its seeding from an int,
// getrandbits, _randbelow and sample() bit for bit, so the same exemplars come out here.
//
// Non-goals: Python's float methods (random(), shuffle of floats), seeds from strings or bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace detaudit::probes {

// CPython's random.Random seeded with a non-negative integer (MT19937, init_by_array over the
// integer's 32-bit words, least significant first).
class py_random {
 public:
  explicit py_random(uint64_t seed);
  uint32_t next_u32();                  // genrand_uint32
  uint32_t getrandbits(int k);          // 1 <= k <= 32
  uint64_t randbelow(uint64_t n);       // Random._randbelow_with_getrandbits, n >= 1, n < 2^32
  // Random.sample(range(n), k): k distinct indices in draw order. Throws std::invalid_argument
  // when k > n.
  std::vector<size_t> sample(size_t n, size_t k);

 private:
  void init_genrand(uint32_t s);
  std::array<uint32_t, 624> mt_{};
  size_t i_ = 624;
};

// lm-eval's fewshot seed when none is given.
inline constexpr uint64_t LMEVAL_FEWSHOT_SEED = 1234;

// The exemplars of n_docs documents, in document order: k indices into the few-shot pool (of
// `pool` entries) each. same_split: the pool is the documents themselves (index d is document
// d): k + 1 are drawn and every exemplar equal to document d is dropped (lm-eval's `x != doc`:
// is_doc(d, i), by default i == d; a dataset holding a document twice has both dropped), keeping
// the first k. Throws std::invalid_argument when the pool is too small.
std::vector<std::vector<size_t>> fewshot_draws(size_t pool, size_t k, size_t n_docs, bool same_split,
                                               uint64_t seed = LMEVAL_FEWSHOT_SEED,
                                               const std::function<bool(size_t, size_t)>& is_doc = {});

}  // namespace detaudit::probes
