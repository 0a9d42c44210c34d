#pragma once
// Turns the CLI's DIR arguments into case directories: a DIR holding case.json is one
// case, otherwise each immediate subdirectory holding case.json is (in sorted order).

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace xattn::conformance {

inline std::vector<std::filesystem::path> find_cases(const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::vector<fs::path> cases;
  for (const auto& arg : dirs) {
    const fs::path dir(arg);
    if (!fs::is_directory(dir)) throw std::invalid_argument("'" + arg + "' is not a directory");
    if (fs::is_regular_file(dir / "case.json")) {
      cases.push_back(dir);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_directory() && fs::is_regular_file(entry.path() / "case.json")) found.push_back(entry.path());
    if (found.empty()) throw std::invalid_argument("no case.json in '" + arg + "' or its immediate subdirectories");
    std::sort(found.begin(), found.end());  // directory order is unspecified
    cases.insert(cases.end(), found.begin(), found.end());
  }
  return cases;
}

}  // namespace xattn::conformance
