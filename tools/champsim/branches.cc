// champsim-branches: reads a ChampSim trace (64-byte `input_instr` records, plain, or xz/gz
// through `xz -dc`/`gzip -dc` chosen by the file name as ChampSim does) and passes every record
// through ChampSim's own `ooo_model_instr` constructor, the code that classifies branches in the
// simulator. Prints one line per kind, `KIND RECORDS TAKEN`, for the kinds ChampSim knows
// (BRANCH_DIRECT_JUMP ... BRANCH_OTHER, NOT_BRANCH), then `RECORDS N`, `LOADS N` (source memory
// operands) and `STORES N` (destination memory operands). Built by scripts/champsim against the
// same source as the simulator, so that bbv's tests compare bbv's classification with ChampSim's.
#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#include "instruction.h"

int main(int argc, char** argv)
{
  if (argc != 2) {
    std::fprintf(stderr, "usage: champsim-branches TRACE\n");
    return 2;
  }
  std::string path = argv[1];
  auto ends = [&](const char* s) {
    std::size_t n = std::strlen(s);
    return path.size() >= n && path.compare(path.size() - n, n, s) == 0;
  };
  FILE* f = nullptr;
  bool piped = false;
  if (ends(".xz") || ends(".gz")) {
    std::string cmd = std::string(ends(".xz") ? "xz" : "gzip") + " -dc -- '";
    for (char c : path) {
      if (c == '\'')
        cmd += "'\\''";
      else
        cmd += c;
    }
    cmd += "'";
    f = popen(cmd.c_str(), "r");
    piped = true;
  } else {
    f = std::fopen(path.c_str(), "rb");
  }
  if (f == nullptr) {
    std::perror(path.c_str());
    return 2;
  }
  constexpr std::size_t kinds = NOT_BRANCH + 1;
  std::array<unsigned long long, kinds> records{};
  std::array<unsigned long long, kinds> taken{};
  unsigned long long total = 0, loads = 0, stores = 0;
  input_instr in;
  static_assert(sizeof(input_instr) == 64, "ChampSim's record is 64 bytes");
  while (std::fread(&in, sizeof in, 1, f) == 1) {
    ooo_model_instr instr{0, in};
    records[instr.branch]++;
    taken[instr.branch] += instr.branch_taken ? 1 : 0;
    total++;
    loads += instr.source_memory.size();
    stores += instr.destination_memory.size();
  }
  int status = piped ? pclose(f) : std::fclose(f);
  if (status != 0) {
    std::fprintf(stderr, "%s: reading failed\n", path.c_str());
    return 2;
  }
  constexpr std::array<const char*, kinds> names{"BRANCH_DIRECT_JUMP", "BRANCH_INDIRECT", "BRANCH_CONDITIONAL", "BRANCH_DIRECT_CALL",
                                                 "BRANCH_INDIRECT_CALL", "BRANCH_RETURN", "BRANCH_OTHER", "NOT_BRANCH"};
  for (std::size_t k = 0; k < kinds; k++)
    std::printf("%s %llu %llu\n", names[k], records[k], taken[k]);
  std::printf("RECORDS %llu\nLOADS %llu\nSTORES %llu\n", total, loads, stores);
  return 0;
}
