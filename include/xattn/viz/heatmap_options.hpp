#pragma once
// What a heatmap shows besides the weights themselves.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xattn::viz {

struct heatmap_options {
  int cell = 16;                    // pixels per weight (square cells)
  int text_scale = 2;               // font pixel size: glyphs are 5 x 9 times this
  std::string xlabel = "Keys";      // under each bottom-row panel; empty: none
  std::string ylabel = "Queries";   // beside each left-column panel; empty: none
  std::vector<std::string> titles;  // empty, or one per panel in row-major grid order
  // Colour scale {lo, hi}; values outside are clamped. Unset: min and max over
  // all panels. {0, 1} shows softmax weights on an absolute scale.
  std::optional<std::pair<double, double>> range;
  bool colorbar = true;  // colour scale with value labels on the right
};

}  // namespace xattn::viz
