// User-facing argument errors: which argument, what was expected, what was given.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace oink {

inline std::string arg_error_message(const char* op, const char* arg, const std::string& expected,
                                     const std::string& got) {
  std::ostringstream s;
  s << "oink." << op << ": argument '" << arg << "' " << expected << ", but got " << got;
  return s.str();
}

// Thrown by validation before any launch; the binding turns it into a Python RuntimeError.
struct ArgError : std::invalid_argument {
  ArgError(const char* op, const char* arg, const std::string& expected, const std::string& got)
      : std::invalid_argument(arg_error_message(op, arg, expected, got)) {}
};

}  // namespace oink
