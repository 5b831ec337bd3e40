// Writing a file whole: the one place that tells a full disk from a path that cannot be written.
#pragma once

#include <string>

namespace detaudit::reports {

// Writes `text` to the file `path` (created or replaced). Throws disk_full_error (util/error.h)
// when the disk, the quota or the file-size limit is full (the CLI exits 3), else input_error
// "WHAT: cannot write 'PATH': REASON" (a missing folder, no permission).
void text_file_write(const std::string& path, const std::string& text, const std::string& what);

}  // namespace detaudit::reports
