// User-facing argument errors: which argument, what was expected, what was given.
// Host code builds messages with std::string and std::to_string, never iostreams: on the H200
// image, inserting an integer into an ostringstream inside the extension crashed (segfault in
// num_put), and messages need nothing more.
#pragma once

#include <stdexcept>
#include <string>

namespace oink {

inline std::string arg_error_message(const char* op, const char* arg, const std::string& expected,
                                     const std::string& got) {
  return std::string("oink.") + op + ": argument '" + arg + "' " + expected + ", but got " + got;
}

// Thrown by validation before any launch; the binding turns it into a Python RuntimeError.
struct ArgError : std::invalid_argument {
  ArgError(const char* op, const char* arg, const std::string& expected, const std::string& got)
      : std::invalid_argument(arg_error_message(op, arg, expected, got)) {}
};

}  // namespace oink
