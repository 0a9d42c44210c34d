#pragma once
// PNG encoding through stb_image_write.
//
// Only stb's declarations are included here; its implementation must be linked
// from exactly one place. Either link Debian's libstb (libstb-dev: -lstb, or
// pkg-config stb), which already contains it, or compile it yourself in one
// .cpp of your program:
//     #define STB_IMAGE_WRITE_IMPLEMENTATION
//     #include <stb/stb_image_write.h>
// Compiling it here with STB_IMAGE_WRITE_STATIC instead would give every
// translation unit a private copy, make these inline functions (external
// linkage) refer to internal-linkage ones — an ODR violation — and clash with
// programs that include stb themselves (its include guard decides which mode wins).

#if __has_include(<stb/stb_image_write.h>)
#include <stb/stb_image_write.h>
#else
#include <stb_image_write.h>
#endif

#include <xattn/viz/canvas.hpp>

#include <filesystem>

namespace xattn::viz {

// Returns false if the file could not be written (stb reports no reason).
inline bool write_png(const std::filesystem::path& path, const canvas& img) {
  if (img.width() <= 0 || img.height() <= 0) return false;
  return stbi_write_png(path.string().c_str(), img.width(), img.height(), 3, img.data(), img.width() * 3) != 0;
}

}  // namespace xattn::viz
