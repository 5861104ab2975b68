#include "core/cuda_targets.h"

#include <cctype>

namespace oink {

std::vector<CudaTarget> parse_cuda_targets(const std::string& list) {
  std::vector<CudaTarget> targets;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find_first_of(";,", begin);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(begin, end - begin);
    begin = end + 1;
    CudaTarget t;
    std::string digits;
    if (item.rfind("sm_", 0) == 0) {
      digits = item.substr(3);
    } else if (item.rfind("compute_", 0) == 0) {
      t.ptx = true;
      digits = item.substr(8);
    } else {
      continue;
    }
    if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
      t.suffix = digits.back();
      digits.pop_back();
    }
    if (digits.empty() || digits.size() > 4) continue;
    bool numeric = true;
    for (char c : digits) numeric = numeric && std::isdigit(static_cast<unsigned char>(c));
    if (!numeric) continue;
    t.arch = std::stoi(digits);
    targets.push_back(t);
  }
  return targets;
}

bool targets_serve(const std::vector<CudaTarget>& targets, int major, int minor) {
  const int device = major * 10 + minor;
  for (const CudaTarget& t : targets) {
    const int t_major = t.arch / 10;
    if (t.suffix == 'a') {
      if (t.arch == device) return true;
    } else if (t.ptx && t.suffix == 0) {
      if (t.arch <= device) return true;
    } else if (t_major == major && t.arch <= device) {  // SASS, or the 'f' family
      return true;
    }
  }
  return false;
}

}  // namespace oink
