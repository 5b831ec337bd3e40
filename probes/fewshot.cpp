// lm-eval's few-shot draw (see fewshot.h): CPython's random.Random, as its _randommodule.c and
// random.py define it.
#include "probes/fewshot.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

namespace detaudit::probes {
namespace {

constexpr size_t MT_N = 624;
constexpr size_t MT_M = 397;

}  // namespace

void py_random::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (size_t i = 1; i < MT_N; ++i)
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  i_ = MT_N;
}

py_random::py_random(uint64_t seed) {
  // The seed's 32-bit words, least significant first; at least one word (0 for 0).
  std::vector<uint32_t> key;
  for (uint64_t v = seed; v != 0; v >>= 32) key.push_back(static_cast<uint32_t>(v));
  if (key.empty()) key.push_back(0);
  init_genrand(19650218u);
  size_t i = 1, j = 0;
  for (size_t k = std::max(MT_N, key.size()); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i, ++j;
    if (i >= MT_N) mt_[0] = mt_[MT_N - 1], i = 1;
    if (j >= key.size()) j = 0;
  }
  for (size_t k = MT_N - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= MT_N) mt_[0] = mt_[MT_N - 1], i = 1;
  }
  mt_[0] = 0x80000000u;
  i_ = MT_N;
}

uint32_t py_random::next_u32() {
  if (i_ >= MT_N) {
    for (size_t k = 0; k < MT_N; ++k) {
      const uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % MT_N] & 0x7fffffffu);
      mt_[k] = mt_[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    i_ = 0;
  }
  uint32_t y = mt_[i_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint32_t py_random::getrandbits(int k) {
  if (k < 1 || k > 32) throw std::invalid_argument("getrandbits: k must be in 1..32, found " + std::to_string(k));
  return next_u32() >> (32 - k);
}

uint64_t py_random::randbelow(uint64_t n) {
  if (n == 0 || n > 0xffffffffull) throw std::invalid_argument("randbelow: n must be in 1..2^32-1");
  int k = 0;
  for (uint64_t v = n; v != 0; v >>= 1) ++k;  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<size_t> py_random::sample(size_t n, size_t k) {
  if (k > n) throw std::invalid_argument("sample larger than population (" + std::to_string(k) + " of " + std::to_string(n) + ")");
  std::vector<size_t> out(k);
  size_t setsize = 21;  // random.py: a list of n beats a set of k below this size
  if (k > 5) setsize += static_cast<size_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; ++i) pool[i] = i;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = randbelow(n - i);
      out[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
    return out;
  }
  std::set<size_t> selected;
  for (size_t i = 0; i < k; ++i) {
    size_t j = randbelow(n);
    while (selected.count(j)) j = randbelow(n);
    selected.insert(j);
    out[i] = j;
  }
  return out;
}

std::vector<std::vector<size_t>> fewshot_draws(size_t pool, size_t k, size_t n_docs, bool same_split, uint64_t seed,
                                               const std::function<bool(size_t, size_t)>& is_doc) {
  const size_t drawn = same_split ? k + 1 : k;
  if (drawn > pool)
    throw std::invalid_argument("the few-shot pool holds " + std::to_string(pool) + " exemplars, fewer than the " +
                                std::to_string(drawn) + " drawn for each document");
  py_random rnd(seed);
  std::vector<std::vector<size_t>> out;
  out.reserve(n_docs);
  for (size_t d = 0; d < n_docs; ++d) {
    std::vector<size_t> picked;
    for (size_t i : rnd.sample(pool, drawn))
      if (!(same_split && (is_doc ? is_doc(d, i) : i == d)) && picked.size() < k) picked.push_back(i);
    out.push_back(std::move(picked));
  }
  return out;
}

}  // namespace detaudit::probes
