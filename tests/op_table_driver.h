// The one driver of the op table (tests/op_cases.h): every case of an op on every backend of this
// test executable that declares the op, compared with kernels/ref by memcmp.
//
// A backend is a registry entry, added by the test file that knows it (kernels/cpu at each
// instruction set, CUDA's host twins, a GPU device): the ops it computes and the cases it leaves
// out are declared there (skips: prepare_for's reasons; leaves_out: its own, with the reason), so
// what a backend does not compute is said before anything runs, and every skip is counted in the
// test's closing messages with its reason. Each case's inputs and reference output are prepared
// once and given to every backend that runs it. A backend that keeps kernels/ref's input checks
// (no skips_refused) must refuse what kernels/ref refuses.
//
// Each executable's op-table file expands DETAUDIT_OP_TABLE_TESTS(WHERE) once: one test case per op.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "op_cases.h"

namespace detaudit::test {

struct op_backend {
  std::string name;            // "cpu avx2", "cuda twin: 3 threads, reversed", "gpu device"
  std::vector<op_kind> ops;    // the ops it computes
  unsigned skips = skips_none;  // the table's reasons it leaves cases out for (op_cases.h, `skips`)
  // Its own further reason to leave case c out ("" when it computes c): e.g. the weight types it
  // hands to kernels/ref, or a variant that applies to some cases only.
  std::function<std::string(const op_case&)> leaves_out;
  // Case c into a guarded output buffer (output_buffer(c, in) and its GUARD).
  std::function<std::vector<float>(const op_case&, const op_inputs&)> run;
};

// The backends of this executable, in the order their files registered them.
inline std::vector<op_backend>& op_backends() {
  static std::vector<op_backend> registry;
  return registry;
}

// Adds backends to the registry; for a namespace-scope initialiser in the file that defines them.
inline bool op_backends_add(std::vector<op_backend> bs) {
  for (op_backend& b : bs) op_backends().push_back(std::move(b));
  return true;
}

struct op_table_result {
  int backends = 0;      // backends that declare the op
  int64_t compared = 0;  // cases compared, over every backend
};

// Every case of op k on every registered backend that declares k.
inline op_table_result op_table_run(op_kind k) {
  std::vector<const op_backend*> bs;
  for (const op_backend& b : op_backends())
    if (std::find(b.ops.begin(), b.ops.end(), k) != b.ops.end()) bs.push_back(&b);
  std::vector<table_tally> tallies(bs.size());
  for (const op_case& c : op_cases()) {
    if (c.op != k) continue;
    CAPTURE(c.name);
    std::optional<prepared_case> shared;
    for (size_t i = 0; i < bs.size(); ++i) {
      const op_backend& b = *bs[i];
      if (b.leaves_out) {
        const std::string why = b.leaves_out(c);
        if (!why.empty()) {
          tallies[i].skip(why);
          continue;
        }
      }
      if (const std::string why = skip_reason(c, b.skips); !why.empty()) {
        tallies[i].skip(why);
        continue;
      }
      if (!shared) shared = prepare(c);  // inputs drawn and kernels/ref run once per case
      if ((b.skips & skips_refused) && !shared->refused.empty()) {
        tallies[i].skip(SKIP_REFUSED);
        continue;
      }
      ++tallies[i].compared;
      const prepared_case* p = &*shared;
      const auto m = mismatch(*p, [&] { return b.run(c, p->in); });
      CHECK_MESSAGE(!m, b.name << ": " << m.value_or(""));  // the message is built on success too (-s)
    }
  }
  op_table_result r;
  r.backends = static_cast<int>(bs.size());
  for (size_t i = 0; i < bs.size(); ++i) {
    MESSAGE(tallies[i].to_string(std::string(op_name(k)) + " on " + bs[i]->name));
    r.compared += tallies[i].compared;
  }
  return r;
}

}  // namespace detaudit::test

// One test case per op of the table, each running every backend this executable registered.
// WHERE, a string literal, tells the executables apart in the test names ("" or " (emulation)").
#define DETAUDIT_OP_TABLE_TEST(KIND, WHERE)                                                               \
  TEST_CASE("op table" WHERE ": every backend that computes " #KIND " gives the reference bits on its cases") { \
    const auto r = detaudit::test::op_table_run(detaudit::test::op_kind::KIND);                         \
    CHECK_MESSAGE(r.compared > 0, "no backend of this executable compared a " #KIND " case");           \
    MESSAGE(r.backends << " backends compute " #KIND " here");                                         \
  }
#define DETAUDIT_OP_TABLE_TESTS(WHERE)          \
  DETAUDIT_OP_TABLE_TEST(matmul, WHERE)         \
  DETAUDIT_OP_TABLE_TEST(rms_norm, WHERE)       \
  DETAUDIT_OP_TABLE_TEST(swiglu, WHERE)         \
  DETAUDIT_OP_TABLE_TEST(add, WHERE)            \
  DETAUDIT_OP_TABLE_TEST(add_bias, WHERE)       \
  DETAUDIT_OP_TABLE_TEST(rope, WHERE)           \
  DETAUDIT_OP_TABLE_TEST(kv_quantize, WHERE)    \
  DETAUDIT_OP_TABLE_TEST(attention, WHERE)     \
  DETAUDIT_OP_TABLE_TEST(geglu, WHERE)         \
  DETAUDIT_OP_TABLE_TEST(swiglu_oai, WHERE)    \
  DETAUDIT_OP_TABLE_TEST(softcap, WHERE)       \
  DETAUDIT_OP_TABLE_TEST(scale, WHERE)
