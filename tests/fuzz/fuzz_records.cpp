// libFuzzer target for the run-record reader: the input is a records file (JSON lines).
//
// Properties: records_read_file either returns records or throws input_error (any other exception,
// a crash or UB is a finding); the counts it reports agree with what it returns; every record it
// accepts is written by record_to_json into a line that reads back into the same JSON (the schema
// has one owner: what the reader accepts, the writer reproduces).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_file_util.h"
#include "reports/audit/record.h"
#include "util/error.h"

namespace rp = detaudit::reports;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = detaudit::fuzz::fuzz_write_temp(data, size);
  try {
    rp::read_stats stats;
    const std::vector<rp::record> recs = rp::records_read_file(path, &stats);
    if (stats.records != recs.size() || stats.records > stats.lines || stats.truncated > 1) __builtin_trap();
    for (const rp::record& r : recs) {
      const rp::json written = rp::record_to_json(r);
      const rp::json again = rp::record_to_json(rp::record_from_json(rp::json::parse(written.dump()), "rewritten"));
      if (again != written) __builtin_trap();
      (void)rp::record_key(r);
    }
  } catch (const detaudit::input_error& e) {
    if (std::string_view(e.what()).starts_with("cannot open")) __builtin_trap();  // the input was never read
  }
  return 0;
}
