// libFuzzer target for the lm-eval samples reader: the input is a samples file (JSON lines).
//
// Properties: lmeval_is_samples_file never throws; lmeval_read either returns samples or throws
// input_error (any other exception, a crash or UB is a finding); the samples it returns have
// distinct (doc_id, filter) pairs, as reports/lmeval.h promises. (lmeval_compare is not called: it
// builds a report, and this target links no report formatter; see reports_stubs.cpp.)
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_file_util.h"
#include "reports/lmeval.h"
#include "util/error.h"

namespace rp = detaudit::reports;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = detaudit::fuzz::fuzz_write_temp(data, size);
  (void)rp::lmeval_is_samples_file(path);
  try {
    const std::vector<rp::lmeval_sample> samples = rp::lmeval_read(path);
    std::set<std::pair<int64_t, std::string>> keys;
    for (const rp::lmeval_sample& s : samples)
      if (!keys.emplace(s.doc_id, s.filter).second) __builtin_trap();
  } catch (const detaudit::input_error& e) {
    if (std::string_view(e.what()).starts_with("cannot open")) __builtin_trap();  // the input was never read
  }
  return 0;
}
