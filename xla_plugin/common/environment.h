// Switches read from the environment, for A/B and tuning runs.
#ifndef JGG_XLA_PLUGIN_COMMON_ENVIRONMENT_H_
#define JGG_XLA_PLUGIN_COMMON_ENVIRONMENT_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace jgg {

// Whether environment variable `name` is set to exactly `value`. Callers keep the answer in a
// static: a switch is read once per process.
inline bool EnvironmentSays(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}

// The count environment variable `name` is set to: `fallback` where it is unset, not a number
// or negative. Callers keep the answer in a static, as above.
inline int64_t EnvironmentCount(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr) return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  return end == value || parsed < 0 ? fallback : parsed;
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_ENVIRONMENT_H_
