#pragma once
// Test helpers: the vendored case directory (tests/data/onnx), scratch copies of real
// cases that tests then break on purpose, and the message a broken case is rejected with.

#include <conformance/case_io.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace conformance_test {

namespace fs = std::filesystem;

inline fs::path data_dir() { return XATTN_CONFORMANCE_DIR; }

// A fresh directory, removed again at scope exit.
struct scratch_dir {
  fs::path path;
  scratch_dir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("xattn-conformance-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~scratch_dir() { fs::remove_all(path); }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

inline nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

inline void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Copies the real case `name` into `dest`, letting `edit` change its case.json first.
inline fs::path copy_case(const std::string& name, const fs::path& dest,
                          const std::function<void(nlohmann::json&)>& edit = {}) {
  fs::copy(data_dir() / name, dest, fs::copy_options::recursive);
  if (edit) {
    auto j = read_json(dest / "case.json");
    edit(j);
    write_text(dest / "case.json", j.dump(1));
  }
  return dest;
}

// The case_error message; any other outcome fails the test.
inline std::string load_error(const fs::path& dir) {
  try {
    xattn::conformance::load_case(dir);
  } catch (const xattn::conformance::case_error& e) {
    return e.what();
  }
  FAIL("load_case(" << dir << ") did not throw case_error");
  return {};
}

}  // namespace conformance_test
