// Test helper: decodes the 8-bit, non-interlaced RGB/RGBA PNGs that headless
// Chromium writes (zlib for the IDAT stream, the five PNG row filters by
// hand), so a test can look at a screenshot's pixels without an image library.
#ifndef JAGRANK_TESTS_METRICS_PNG_H_
#define JAGRANK_TESTS_METRICS_PNG_H_

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace jagrank {
namespace metrics_test {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3]
  const uint8_t* At(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

inline uint32_t ReadBigEndian32(const std::string& s, size_t pos) {
  return (uint32_t(uint8_t(s[pos])) << 24) | (uint32_t(uint8_t(s[pos + 1])) << 16) |
         (uint32_t(uint8_t(s[pos + 2])) << 8) | uint32_t(uint8_t(s[pos + 3]));
}

// Returns false (with `error`) for anything but 8-bit RGB/RGBA, non-interlaced.
inline bool DecodePng(const std::string& file, RgbImage* image, std::string* error) {
  static const char kSignature[] = "\x89PNG\r\n\x1a\n";
  if (file.size() < 8 || file.compare(0, 8, kSignature, 8) != 0) {
    *error = "not a PNG";
    return false;
  }
  int width = 0, height = 0, channels = 0;
  std::string idat;
  for (size_t pos = 8; pos + 8 <= file.size();) {
    const uint32_t length = ReadBigEndian32(file, pos);
    const std::string type = file.substr(pos + 4, 4);
    if (pos + 12 + length > file.size()) {
      *error = "truncated chunk " + type;
      return false;
    }
    const size_t data = pos + 8;
    if (type == "IHDR") {
      width = static_cast<int>(ReadBigEndian32(file, data));
      height = static_cast<int>(ReadBigEndian32(file, data + 4));
      const int depth = uint8_t(file[data + 8]), color = uint8_t(file[data + 9]), interlace = uint8_t(file[data + 12]);
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        *error = "unsupported PNG: depth " + std::to_string(depth) + " color type " + std::to_string(color);
        return false;
      }
      channels = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat.append(file, data, length);
    } else if (type == "IEND") {
      break;
    }
    pos = data + length + 4;  // + CRC
  }
  if (width <= 0 || height <= 0 || idat.empty()) {
    *error = "no IHDR or IDAT";
    return false;
  }
  const size_t stride = static_cast<size_t>(width) * channels;
  std::vector<uint8_t> raw((stride + 1) * height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    *error = "bad IDAT stream";
    return false;
  }
  // Undo the per-row filters in place (each row: filter byte, then bytes).
  std::vector<uint8_t> pixels(stride * height);
  for (int y = 0; y < height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* out = &pixels[y * stride];
    const uint8_t* up = y > 0 ? &pixels[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? out[i - channels] : 0;
      const int b = up ? up[i] : 0;
      const int c = (up && i >= static_cast<size_t>(channels)) ? up[i - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: predictor = 0; break;
        case 1: predictor = a; break;
        case 2: predictor = b; break;
        case 3: predictor = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default:
          *error = "bad filter type " + std::to_string(filter);
          return false;
      }
      out[i] = static_cast<uint8_t>(in[i] + predictor);
    }
  }
  image->width = width;
  image->height = height;
  image->rgb.resize(static_cast<size_t>(width) * height * 3);
  for (size_t p = 0; p < static_cast<size_t>(width) * height; ++p) {
    for (int k = 0; k < 3; ++k) image->rgb[p * 3 + k] = pixels[p * channels + k];
  }
  return true;
}

// Pixels within `tolerance` (per channel) of the colour r, g, b.
inline int64_t CountColor(const RgbImage& image, int r, int g, int b, int tolerance = 12) {
  int64_t n = 0;
  for (size_t p = 0; p + 2 < image.rgb.size(); p += 3) {
    if (std::abs(image.rgb[p] - r) <= tolerance && std::abs(image.rgb[p + 1] - g) <= tolerance &&
        std::abs(image.rgb[p + 2] - b) <= tolerance) {
      ++n;
    }
  }
  return n;
}

}  // namespace metrics_test
}  // namespace jagrank

#endif  // JAGRANK_TESTS_METRICS_PNG_H_
