// Keeps docs/*.md from rotting. For every fenced code block of every Markdown file:
//
//   ```cpp (or ```c, ```python, ```cmake): the line before must be   <!-- snippet: PATH#NAME -->   (or PATH alone
//       for a whole file), PATH relative to the repository root. The block must equal the region
//       of PATH between the lines "// [snippet NAME]" and "// [end NAME]" ("# ..." in CMake and Python files),
//       modulo common leading indentation and trailing blanks; marker lines of other regions inside
//       the region are skipped. Those files are compiled and run by the tests, so the docs are too.
//   ```text: free (drawings, tables), unless preceded by   <!-- message: PATH#ANCHOR -->   -- then
//       it must equal the C++ string literal of PATH (adjacent literals concatenated, escapes
//       decoded) that contains ANCHOR: an error message quoted in the docs stays the real one --
//       or by   <!-- output: PATH -->   -- then it must equal the file PATH, a program's output
//       that a test compares with what the program prints (explain's text, for example).
//   ```sh: free (shell commands).
//   any other or no language: an error, so C++ cannot slip in unchecked.
//
// Relative Markdown links [text](path) must name existing files. Every problem is reported as
// FILE:LINE: message; the exit status is 1 if there was any.
//
// usage: check_snippets ROOT [FILE.md ...]     (default: every ROOT/docs/*.md)
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct checker {
  fs::path root;
  int errors = 0, blocks = 0, links = 0;

  void error(const std::string& where, std::size_t line, const std::string& msg) {
    std::cout << where << ':' << line << ": " << msg << '\n';
    ++errors;
  }
  std::string rel(const fs::path& p) const { return p.lexically_relative(root).generic_string(); }

  static std::optional<std::vector<std::string>> read_lines(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return std::nullopt;
    std::vector<std::string> lines;
    std::string l;
    while (std::getline(in, l)) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
      lines.push_back(l);
    }
    return lines;
  }

  static std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
  }

  /// Drop trailing blanks per line and blank lines at both ends; optionally remove the common indentation.
  static std::vector<std::string> normalise(std::vector<std::string> v, bool dedent) {
    for (auto& l : v) l.erase(l.find_last_not_of(" \t") + 1);
    while (!v.empty() && v.back().empty()) v.pop_back();
    while (!v.empty() && v.front().empty()) v.erase(v.begin());
    if (dedent) {
      std::size_t ind = std::string::npos;
      for (const auto& l : v)
        if (!l.empty()) ind = std::min(ind, l.find_first_not_of(" \t"));
      if (ind != std::string::npos)
        for (auto& l : v)
          if (!l.empty()) l.erase(0, ind);
    }
    return v;
  }

  static bool is_marker(const std::string& t, const char* kind, std::string* name) {
    for (const char* lead : {"// [", "# ["}) {
      const std::string p = std::string(lead) + kind + " ";
      if (t.rfind(p, 0) == 0 && t.size() > p.size() + 1 && t.back() == ']') {
        if (name) *name = t.substr(p.size(), t.size() - p.size() - 1);
        return true;
      }
    }
    return false;
  }

  struct region {
    std::vector<std::string> text;
    std::size_t first_line = 0;        // 1-based line of the region's first content line
    std::vector<std::size_t> line_of;  // source line of each text line
  };

  /// The region `name` of `file` ("" = the whole file), or an error message.
  std::variant<region, std::string> find_region(const fs::path& file, const std::string& name) {
    const auto lines = read_lines(file);
    if (!lines) return "cannot read " + rel(file);
    region r;
    if (name.empty()) {
      for (std::size_t n = 0; n < lines->size(); ++n) {
        r.text.push_back((*lines)[n]);
        r.line_of.push_back(n + 1);
      }
      return r;
    }
    std::optional<std::size_t> start;
    for (std::size_t n = 0; n < lines->size(); ++n) {
      const std::string t = trim((*lines)[n]);
      std::string got;
      if (is_marker(t, "snippet", &got) && got == name) {
        if (start) return rel(file) + ":" + std::to_string(n + 1) + ": region '" + name + "' opened twice";
        start = n;
      } else if (is_marker(t, "end", &got) && got == name) {
        if (!start)
          return rel(file) + ":" + std::to_string(n + 1) + ": '[end " + name + "]' before '[snippet " + name + "]'";
        for (std::size_t m = *start + 1; m < n; ++m) {
          const std::string tm = trim((*lines)[m]);
          if (is_marker(tm, "snippet", nullptr) || is_marker(tm, "end", nullptr)) continue;
          r.text.push_back((*lines)[m]);
          r.line_of.push_back(m + 1);
        }
        return r;
      }
    }
    if (start)
      return rel(file) + ":" + std::to_string(*start + 1) + ": region '" + name + "' is never closed by '[end " + name +
             "]'";
    return "no region '" + name + "' (a line '// [snippet " + name + "]') in " + rel(file);
  }

  /// All C++ string literals of a source, adjacent ones concatenated, escapes decoded.
  static std::vector<std::string> string_literals(const std::string& src) {
    std::vector<std::string> out;
    std::string cur;
    bool in_seq = false;
    auto close = [&] {
      if (in_seq) out.push_back(cur);
      cur.clear();
      in_seq = false;
    };
    for (std::size_t i = 0; i < src.size();) {
      const char c = src[i];
      if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
        i = src.find('\n', i);
        if (i == std::string::npos) break;
        continue;
      }
      if (c == '/' && i + 1 < src.size() && src[i + 1] == '*') {
        i = src.find("*/", i + 2);
        if (i == std::string::npos) break;
        i += 2;
        continue;
      }
      if (c == '\'') {  // a character literal (or a digit separator: harmless)
        ++i;
        while (i < src.size() && src[i] != '\'' && src[i] != '\n') i += src[i] == '\\' ? 2 : 1;
        ++i;
        close();
        continue;
      }
      if (c == '"') {
        in_seq = true;
        for (++i; i < src.size() && src[i] != '"'; ++i) {
          if (src[i] != '\\') {
            cur += src[i];
            continue;
          }
          const char e = src[++i];
          cur += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
        ++i;
        continue;
      }
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') close();
      ++i;
    }
    close();
    return out;
  }

  void check_block(const fs::path& md, std::size_t fence_line, const std::string& lang,
                   const std::vector<std::string>& body, const std::string& marker_line) {
    ++blocks;
    const std::string where = rel(md);
    static const std::regex snippet_re(R"(^<!--\s*snippet:\s*([^#\s]+)(?:#(\S+))?\s*-->$)");
    static const std::regex message_re(R"(^<!--\s*message:\s*([^#\s]+)#(.+?)\s*-->$)");
    static const std::regex output_re(R"(^<!--\s*output:\s*(\S+)\s*-->$)");
    std::smatch m;
    const std::string marker = trim(marker_line);
    if (lang == "sh") return;
    if (lang == "text") {
      if (std::regex_match(marker, m, output_re)) {
        const auto want = read_lines(root / m[1].str());
        if (!want) return error(where, fence_line, "output marker names " + m[1].str() + ", which cannot be read");
        return compare(where, fence_line, body, normalise(*want, false), m[1].str(), {}, false);
      }
      if (!std::regex_match(marker, m, message_re)) return;
      const fs::path file = root / m[1].str();
      std::ifstream in(file, std::ios::binary);
      if (!in) return error(where, fence_line, "message marker names " + m[1].str() + ", which cannot be read");
      std::stringstream ss;
      ss << in.rdbuf();
      for (const auto& lit : string_literals(ss.str())) {
        if (lit.find(m[2].str()) == std::string::npos) continue;
        std::vector<std::string> want;
        std::stringstream ls(lit);
        for (std::string l; std::getline(ls, l);) want.push_back(l);
        return compare(where, fence_line, body, normalise(want, false), m[1].str() + " (string literal)", {}, false);
      }
      return error(where, fence_line, "no string literal in " + m[1].str() + " contains '" + m[2].str() + "'");
    }
    if (lang != "cpp" && lang != "c" && lang != "cmake" && lang != "python")
      return error(where, fence_line,
                   "code block of language '" + lang +
                       "': use ```cpp, ```c, ```python or ```cmake (quoted from a tested file), ```sh or ```text");
    if (!std::regex_match(marker, m, snippet_re))
      return error(where, fence_line,
                   "```" + lang +
                       " block without a '<!-- snippet: FILE#REGION -->' line before it: every code block "
                       "must be quoted from a file the tests compile");
    const std::string file = m[1].str(), name = m[2].matched ? m[2].str() : "";
    auto found = find_region(root / file, name);
    if (auto* msg = std::get_if<std::string>(&found)) return error(where, fence_line, *msg);
    const auto& r = std::get<region>(found);
    compare(where, fence_line, body, normalise(r.text, true), file + (name.empty() ? "" : "#" + name), r.line_of, true,
            r.text);
  }

  void compare(const std::string& where, std::size_t fence_line, const std::vector<std::string>& body_raw,
               const std::vector<std::string>& want, const std::string& source, const std::vector<std::size_t>& line_of,
               bool dedent, const std::vector<std::string>& src_text = {}) {
    const auto got = normalise(body_raw, dedent);
    // line numbers of the normalised block: skip the leading blank lines normalise() dropped
    std::size_t lead = 0;
    while (lead < body_raw.size() && trim(body_raw[lead]).empty()) ++lead;
    for (std::size_t n = 0; n < std::max(got.size(), want.size()); ++n) {
      const std::string* g = n < got.size() ? &got[n] : nullptr;
      const std::string* w = n < want.size() ? &want[n] : nullptr;
      if (g && w && *g == *w) continue;
      std::ostringstream os;
      os << "block differs from " << source;
      if (w && !line_of.empty()) {
        std::size_t lead_src = 0;  // blank lines normalise() dropped at the start of the region
        while (lead_src < line_of.size() && lead_src < src_text.size() && trim(src_text[lead_src]).empty()) ++lead_src;
        if (lead_src + n < line_of.size()) os << " (its line " << line_of[lead_src + n] << ")";
      }
      os << "\n  doc:  " << (g ? *g : std::string("<end of block>"))
         << "\n  code: " << (w ? *w : std::string("<end of region>"));
      return error(where, fence_line + 1 + lead + n, os.str());
    }
  }

  void check_links(const fs::path& md, std::size_t line_no, const std::string& line) {
    // drop inline code spans, then look at [text](target)
    std::string s;
    bool code = false;
    for (char c : line) {
      if (c == '`')
        code = !code;
      else if (!code)
        s += c;
    }
    static const std::regex link_re(R"(\]\(([^)\s]+)\))");
    for (auto it = std::sregex_iterator(s.begin(), s.end(), link_re); it != std::sregex_iterator(); ++it) {
      std::string target = (*it)[1].str();
      if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 || target.rfind("mailto:", 0) == 0 ||
          target[0] == '#')
        continue;
      ++links;
      target = target.substr(0, target.find('#'));
      if (!fs::exists(md.parent_path() / target))
        error(rel(md), line_no, "link to " + target + ", which does not exist");
    }
  }

  void check_file(const fs::path& md) {
    const auto lines = read_lines(md);
    if (!lines) return error(rel(md), 0, "cannot read the file");
    static const std::regex fence_re(R"(^(\s*)(```+|~~~+)\s*([^\s`]*).*$)");
    std::string prev;  // last non-blank line before the current one, outside blocks
    std::size_t prev_line = 0;
    auto dangling = [&] {
      if (prev.rfind("<!-- snippet:", 0) == 0 || prev.rfind("<!-- message:", 0) == 0 ||
          prev.rfind("<!-- output:", 0) == 0)
        error(rel(md), prev_line, "marker '" + prev + "' is not followed by a code block");
    };
    for (std::size_t n = 0; n < lines->size(); ++n) {
      const std::string& l = (*lines)[n];
      std::smatch m;
      // CommonMark: the info string of a backtick fence contains no backtick (else it is inline code)
      if (std::regex_match(l, m, fence_re) &&
          !(m[2].str()[0] == '`' && l.find('`', l.find(m[2].str()) + m[2].str().size()) != std::string::npos)) {
        const std::string fence = m[2].str(), lang = m[3].str();
        std::vector<std::string> body;
        std::size_t k = n + 1;
        for (; k < lines->size(); ++k) {
          const std::string t = trim((*lines)[k]);
          if (t.rfind(fence, 0) == 0 && trim(t.substr(fence.size())).empty()) break;
          body.push_back((*lines)[k]);
        }
        if (k == lines->size()) return error(rel(md), n + 1, "code block never closed");
        check_block(md, n + 1, lang.empty() ? "(none)" : lang, body, prev);
        n = k;
        prev.clear();
        continue;
      }
      const std::string t = trim(l);
      if (t.empty()) continue;
      dangling();
      check_links(md, n + 1, l);
      prev = t;
      prev_line = n + 1;
    }
    dangling();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: check_snippets ROOT [FILE.md ...]\n";
    return 2;
  }
  checker c;
  c.root = fs::weakly_canonical(argv[1]);
  std::vector<fs::path> files;
  for (int a = 2; a < argc; ++a) files.push_back(fs::weakly_canonical(argv[a]));
  if (files.empty()) {
    for (const auto& e : fs::directory_iterator(c.root / "docs"))
      if (e.path().extension() == ".md") files.push_back(e.path());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) {
    std::cout << "no Markdown files found\n";
    return 1;
  }
  for (const auto& f : files) c.check_file(f);
  std::cout << "check_snippets: " << files.size() << " files, " << c.blocks << " code blocks, " << c.links << " links, "
            << c.errors << " errors\n";
  return c.errors == 0 ? 0 : 1;
}
