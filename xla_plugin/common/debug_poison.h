// Test seam: with JGG_POISON_OUTPUTS=1 in the environment, every handler fills
// its output with 0xFF bytes (NaN in f32, bf16 and f16) before the kernel
// runs, so a test sees any element the kernel failed to write. Read once per
// process; off by default, and costs nothing then.
#ifndef JGG_XLA_PLUGIN_COMMON_DEBUG_POISON_H_
#define JGG_XLA_PLUGIN_COMMON_DEBUG_POISON_H_

#include <cstdlib>
#include <cstring>

namespace jgg {

inline constexpr unsigned char kPoisonByte = 0xFF;

inline bool PoisonOutputs() {
  static const bool enabled = [] {
    const char* value = std::getenv("JGG_POISON_OUTPUTS");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return enabled;
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_DEBUG_POISON_H_
