// xattn-conformance DIR...: runs converted ONNX node-test cases and prints one
// PASS/FAIL line per case, then "N passed, M failed".
// Exit status: 0 all passed, 1 some failed, 2 bad arguments or a malformed case
// (which stops the run: its results would mean nothing).

#include "check_case.hpp"
#include "find_cases.hpp"

#include "case_io.hpp"

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"Run ONNX Attention/Softmax conformance cases against xattn."};
  std::vector<std::string> dirs;
  app.add_option("DIR", dirs, "a case directory (holding case.json), or a directory of case directories")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  std::vector<std::filesystem::path> cases;
  try {
    cases = xattn::conformance::find_cases(dirs);
  } catch (const std::exception& e) {
    std::cerr << "xattn-conformance: " << e.what() << '\n';
    return 2;
  }

  int passed = 0, failed = 0;
  for (const auto& dir : cases) {
    try {
      const auto outcome = xattn::conformance::check_case(xattn::conformance::load_case(dir));
      std::cout << outcome.line << std::endl;  // flushed: long runs show progress
      ++(outcome.passed ? passed : failed);
    } catch (const xattn::conformance::case_error& e) {
      std::cerr << "xattn-conformance: " << e.what() << '\n';
      return 2;
    } catch (const std::exception& e) {  // e.g. an unreadable directory
      std::cerr << "xattn-conformance: cannot load case " << dir.string() << ": " << e.what() << '\n';
      return 2;
    }
  }
  std::cout << passed << " passed, " << failed << " failed" << std::endl;
  return failed ? 1 : 0;
}
