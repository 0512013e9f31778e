// Switches read from the environment, for A/B and tuning runs.
#ifndef JGG_XLA_PLUGIN_COMMON_ENVIRONMENT_H_
#define JGG_XLA_PLUGIN_COMMON_ENVIRONMENT_H_

#include <cstdlib>
#include <cstring>

namespace jgg {

// Whether environment variable `name` is set to exactly `value`. Callers keep the answer in a
// static: a switch is read once per process.
inline bool EnvironmentSays(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_ENVIRONMENT_H_
